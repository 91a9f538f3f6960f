// dense<Units>: y = x · kernel + bias over the last axis, as Keras's Dense.
//
//   input   (B, ..., in)
//   kernel  (in, Units)     glorot_uniform
//   bias    (Units,)        zeros
//   output  (B, ..., Units)
//
// Options: kernel_initializer<I>, bias_initializer<I>, kernel_regularizer<R>,
// bias_regularizer<R>, e.g. dense<64, kernel_initializer<initializers::he_normal>>.
//
// When a relu, tanh or sigmoid follows, it runs inside the matmul as a oneDNN
// post-op and the activation layer only applies its derivative in backward.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>

#include "typeflow/backend/cpu/matmul.hpp"
#include "typeflow/backend/cpu/parallel.hpp"
#include "typeflow/initializers/initializers.hpp"
#include "typeflow/layers/activation_traits.hpp"
#include "typeflow/layers/options.hpp"
#include "typeflow/model/layer.hpp"

namespace typeflow {

template <int Units, class... Options>
struct dense {
  static constexpr std::string_view scope_name = "dense";
  static std::string type_name() {
    return "dense<" + std::to_string(Units) + (sizeof...(Options) ? ", ...>" : ">");
  }

  template <class In, class Context>
  struct bind : layer_defaults {
    static_assert(layer_check<layer_at<Context::position, dense>, given<In>, (Units > 0)>::passed,
                  "dense<Units>: Units, the number of output features, must be positive");
    static_assert(layer_check<layer_at<Context::position, dense>, given<In>, (In::rank >= 1)>::passed,
                  "dense<Units>: the input needs at least one axis; dense works over the last one");
    static_assert(layer_check<layer_at<Context::position, dense>, given<In>,
                              (detail::is_known_option<Options> && ...)>::passed,
                  "dense<Units, Options...>: each option must be kernel_initializer<>, bias_initializer<>, "
                  "kernel_regularizer<> or bias_regularizer<>");
    static_assert(layer_check<layer_at<Context::position, dense>, given<In>,
                              option_count<kernel_initializer, Options...> <= 1 &&
                                  option_count<bias_initializer, Options...> <= 1 &&
                                  option_count<kernel_regularizer, Options...> <= 1 &&
                                  option_count<bias_regularizer, Options...> <= 1>::passed,
                  "dense<Units, Options...>: each kind of option may be given once");

    static constexpr int units = Units > 0 ? Units : 1;  // keeps one error per mistake
    static constexpr int in_features = In::template dim<-1>;
    static constexpr std::size_t rows_per_sample = In::size / static_cast<std::size_t>(in_features);
    using input_shape = In;
    using output_shape = replace_last_t<In, units>;
    using kernel_shape = shape<in_features, units>;
    using params = param_list<
        param<"kernel", kernel_shape, option_t<kernel_initializer, initializers::glorot_uniform, Options...>,
              param_kind::kernel, option_t<kernel_regularizer, regularizers::none, Options...>>,
        param<"bias", shape<units>, option_t<bias_initializer, initializers::zeros, Options...>, param_kind::bias,
              option_t<bias_regularizer, regularizers::none, Options...>>>;
    static constexpr std::size_t flops_per_sample = 2 * rows_per_sample * in_features * units;
    static constexpr epilogue fused = fusable_epilogue<typename Context::next>;

    template <int Batch>
    class executor {
      static constexpr int rows = Batch * static_cast<int>(rows_per_sample);
      // The kernel's rows are stored padded (see padded_row_length).
      static constexpr int kernel_stride = static_cast<int>(std::tuple_element_t<0, typename params::tuple>::row_stride);

     public:
      explicit executor(const layer_io& io)
          : io_(io),
            forward_(*io.context, {rows, units, in_features, false, false, 0, kernel_stride}, true, fused),
            // d_kernel (in, units) = x^T (in, rows) · d_out (rows, units)
            kernel_grad_(*io.context, {in_features, units, rows, true, false, 0, 0, kernel_stride}, false),
            // d_in (rows, in) = d_out (rows, units) · kernel^T (units, in)
            input_grad_(*io.context, {rows, in_features, units, false, true, 0, kernel_stride}, false) {}

      std::size_t scratchpad_bytes() const {
        return std::max({forward_.scratchpad_bytes(), kernel_grad_.scratchpad_bytes(),
                         input_grad_.scratchpad_bytes()});
      }

      void bind(std::byte* scratchpad) {
        const float* kernel = io_.params + params::template offset<0>;
        const float* bias = io_.params + params::template offset<1>;
        forward_.bind(io_.in, kernel, bias, io_.out, scratchpad);
        kernel_grad_.bind(io_.in, io_.d_out, nullptr, io_.grads + params::template offset<0>, scratchpad);
        if (io_.d_in) input_grad_.bind(io_.d_out, kernel, nullptr, io_.d_in, scratchpad);
      }

      void forward() { forward_.run(); }

      void backward() {
        kernel_grad_.run();
        bias_gradient();
        if (io_.d_in) input_grad_.run();
      }

     private:
      // d_bias (units) = the column sums of d_out (rows, units).
      void bias_gradient() { backend::cpu::column_sums(io_.d_out, rows, units, io_.grads + params::template offset<1>); }

      layer_io io_;
      backend::cpu::matmul forward_, kernel_grad_, input_grad_;
    };
  };
};

}  // namespace typeflow

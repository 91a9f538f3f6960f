// Element-wise activations: relu, tanh, sigmoid, gelu (exact) and gelu_tanh.
//
//   input (B, ...) -> output (B, ...), no parameters.
//
// relu, tanh and sigmoid right after a dense run inside its matmul (a oneDNN
// post-op): their output is the dense's output, and their backward multiplies
// the gradient in place by the derivative taken from that output.
#pragma once

#include <cstddef>
#include <string>

#include "typeflow/backend/cpu/parallel.hpp"
#include "typeflow/core/fixed_string.hpp"
#include "typeflow/core/functors.hpp"
#include "typeflow/layers/activation_traits.hpp"
#include "typeflow/layers/dense.hpp"
#include "typeflow/model/layer.hpp"

namespace typeflow {

template <class Functor, epilogue Epilogue, fixed_string Name>
struct activation {
  static std::string type_name() { return std::string(Name.view()); }

  template <class In, class Context>
  struct bind : layer_defaults {
    using input_shape = In;
    using output_shape = In;
    // Fused when the previous layer is a matmul that takes this epilogue.
    static constexpr bool fused =
        Epilogue != epilogue::none && fuses_epilogue<typename Context::previous>;
    static constexpr bool output_aliases_input = fused;
    static constexpr bool gradient_in_place = true;
    static constexpr std::size_t flops_per_sample = fused ? 0 : In::size;

    template <int Batch>
    class executor : public executor_defaults {
      static constexpr std::ptrdiff_t count = static_cast<std::ptrdiff_t>(Batch * In::size);

     public:
      explicit executor(const layer_io& io) : io_(io) {}

      void forward() {
        if constexpr (!fused) {
          const float* in = io_.in;
          float* out = io_.out;
          backend::cpu::parallel_for(count, [=](std::ptrdiff_t i) { out[i] = Functor{}.value(in[i]); });
        }
      }

      // d_in = d_out * f'(.), in place (d_in and d_out are the same buffer).
      void backward() {
        if (!io_.d_in) return;
        float* grad = io_.d_in;
        if constexpr (Functor::derivative_from_output) {
          const float* out = io_.out;
          backend::cpu::parallel_for(count, [=](std::ptrdiff_t i) {
            grad[i] *= Functor{}.derivative_at_output(out[i]);
          });
        } else {
          const float* in = io_.in;
          backend::cpu::parallel_for(count, [=](std::ptrdiff_t i) {
            grad[i] *= Functor{}.derivative_at_input(in[i]);
          });
        }
      }

     private:
      layer_io io_;
    };
  };
};

using relu = activation<functors::relu, epilogue::relu, "relu">;
using tanh = activation<functors::tanh_fn, epilogue::tanh, "tanh">;
using sigmoid = activation<functors::sigmoid, epilogue::sigmoid, "sigmoid">;
using gelu = activation<functors::gelu_exact, epilogue::none, "gelu">;
using gelu_tanh = activation<functors::gelu_tanh, epilogue::none, "gelu_tanh">;

template <>
inline constexpr epilogue fusable_epilogue<relu> = epilogue::relu;
template <>
inline constexpr epilogue fusable_epilogue<tanh> = epilogue::tanh;
template <>
inline constexpr epilogue fusable_epilogue<sigmoid> = epilogue::sigmoid;
template <int Units, class... Options>
inline constexpr bool fuses_epilogue<dense<Units, Options...>> = true;

}  // namespace typeflow

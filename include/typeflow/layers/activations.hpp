// Element-wise activations: relu, tanh, sigmoid, gelu (exact) and gelu_tanh.
//
//   input (B, ...) -> output (B, ...), no parameters.
//
// relu, tanh and sigmoid right after a dense run inside its matmul (a oneDNN
// post-op): their output is the dense's output, and their backward multiplies
// the gradient in place by the derivative taken from that output.
//
// They keep their input's dtype: under a 16-bit policy they read and write
// 16-bit storage and compute each element in float32.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>

#include "typeflow/backend/cpu/parallel.hpp"
#include "typeflow/core/fixed_string.hpp"
#include "typeflow/core/functors.hpp"
#include "typeflow/layers/activation_traits.hpp"
#include "typeflow/layers/dense.hpp"
#include "typeflow/model/layer.hpp"
#include "typeflow/precision/storage.hpp"

namespace typeflow {

template <class Functor, epilogue Epilogue, fixed_string Name>
struct activation {
  using functor = Functor;  // what other backends run (backend/cuda/layers.cuh)
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
    using compute_dtype = typename Context::precision::input;
    using output_dtype = typename Context::precision::input;

    template <int Batch>
    class executor : public executor_defaults {
      static constexpr std::ptrdiff_t count = static_cast<std::ptrdiff_t>(Batch * In::size);
      using value = typename output_dtype::value_type;  // float, f16 or bf16

     public:
      explicit executor(const layer_io& io) : io_(io) {}

      void forward() {
        if constexpr (fused) {
          return;
        } else if constexpr (std::is_same_v<value, float>) {
          const float* in = io_.in;
          float* out = io_.out;
          backend::cpu::parallel_for(count, [=](std::ptrdiff_t i) { out[i] = Functor{}.value(in[i]); });
        } else {  // 16-bit storage: blocks converted to float32 and back
          value* out = reinterpret_cast<value*>(io_.out);
          precision::for_each_block_as_float<output_dtype>(
              reinterpret_cast<const value*>(io_.in), count, [=](float* x, std::size_t begin, std::size_t length) {
#pragma omp simd
                for (std::size_t j = 0; j < length; ++j) x[j] = Functor{}.value(x[j]);
                convert(x, out + begin, length);
              });
        }
      }

      // d_in = d_out * f'(.), in place (d_in and d_out are the same buffer).
      void backward() {
        if (!io_.d_in) return;
        float* grad = io_.d_in;
        const float* from = Functor::derivative_from_output ? io_.out : io_.in;
        if constexpr (std::is_same_v<value, float>) {
          backend::cpu::parallel_for(count, [=](std::ptrdiff_t i) { grad[i] *= derivative(from[i]); });
        } else {
          precision::for_each_block_as_float<output_dtype>(
              reinterpret_cast<const value*>(from), count, [=](const float* x, std::size_t begin, std::size_t length) {
                float* g = grad + begin;
#pragma omp simd
                for (std::size_t j = 0; j < length; ++j) g[j] *= derivative(x[j]);
              });
        }
      }

     private:
      // f'(.) from the output or from the input, as the functor defines it.
      static float derivative(float x) {
        if constexpr (Functor::derivative_from_output)
          return Functor{}.derivative_at_output(x);
        else
          return Functor{}.derivative_at_input(x);
      }

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
// Matched by the spec's functor, not as activation<Functor, Epilogue, Name>:
// nvcc 13 does not deduce the fixed_string parameter in a partial
// specialization, and would bind a mixed-precision network differently
// from g++ (its activations taking float32 only).
template <class Spec>
  requires requires { typename Spec::functor; }
inline constexpr dtype_flow dtype_flow_of<Spec> = dtype_flow::passes_through;

}  // namespace typeflow

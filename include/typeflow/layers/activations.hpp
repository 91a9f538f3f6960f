// Element-wise activations: relu, tanh, sigmoid, gelu (exact) and gelu_tanh.
//
//   input (B, ...) -> output (B, ...), no parameters.
//
// relu, tanh and sigmoid right after a dense run inside its matmul (its
// epilogue): their output is the dense's output, and their backward
// multiplies the gradient in place by the derivative taken from that output.
// On the GPU gelu_tanh after a dense (whose width is a multiple of 8) runs in
// the product's epilogue too, and the dense, which keeps the product, takes
// its derivative in backward (layers/activation_traits.hpp).
//
// They keep their input's dtype: under a 16-bit policy they read and write
// 16-bit storage and compute each element in float32. Each is a functor of
// core/functors.hpp, which both backends run (backend/cpu/activations.hpp,
// backend/cuda/layers.hpp).
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>

#include "typeflow/core/fixed_string.hpp"
#include "typeflow/core/functors.hpp"
#include "typeflow/layers/activation_traits.hpp"
#include "typeflow/layers/dense.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {

template <class Functor, epilogue Epilogue, fixed_string Name>
struct activation {
  using functor = Functor;  // what the executors run
  static std::string type_name() { return std::string(Name.view()); }

  template <class In, class Context>
  struct bind : layer_defaults {
    using input_shape = In;
    using output_shape = In;
    // Fused when the previous layer is a matmul that takes this epilogue.
    static constexpr bool fused =
        Epilogue != epilogue::none &&
        epilogue_between<typename Context::previous, activation, Context::gpu> == Epilogue;
    static constexpr bool output_aliases_input = fused;
    static constexpr bool gradient_in_place = true;
    static constexpr std::size_t flops_per_sample = fused ? 0 : In::size;
    using compute_dtype = typename Context::precision::input;
    using output_dtype = typename Context::precision::input;
  };
};

using relu = activation<functors::relu, epilogue::relu, "relu">;
using tanh = activation<functors::tanh_fn, epilogue::tanh, "tanh">;
using sigmoid = activation<functors::sigmoid, epilogue::sigmoid, "sigmoid">;
using gelu = activation<functors::gelu_exact, epilogue::none, "gelu">;
using gelu_tanh = activation<functors::gelu_tanh, epilogue::gelu_tanh, "gelu_tanh">;

template <>
inline constexpr epilogue fusable_epilogue<relu> = epilogue::relu;
template <>
inline constexpr epilogue fusable_epilogue<tanh> = epilogue::tanh;
template <>
inline constexpr epilogue fusable_epilogue<sigmoid> = epilogue::sigmoid;
template <>
inline constexpr epilogue fusable_epilogue<gelu_tanh> = epilogue::gelu_tanh;
// A dense fuses the activation after it, unless it has an adapter (lora<>).
template <int Units, class... Options>
inline constexpr bool fuses_epilogue<dense<Units, Options...>> = lora_option_count<Options...> == 0;
// cuBLASLt keeps the product in rows of a multiple of 8 elements: the
// backward's gelu' then reads it as one flat array.
template <int Units, class... Options>
inline constexpr bool fuses_gelu_on_gpu<dense<Units, Options...>> = Units % 8 == 0;
// Matched by the spec's functor, not as activation<Functor, Epilogue, Name>:
// nvcc 13 does not deduce the fixed_string parameter in a partial
// specialization, and would bind a mixed-precision network differently
// from g++ (its activations taking float32 only).
template <class Spec>
  requires requires { typename Spec::functor; }
inline constexpr dtype_flow dtype_flow_of<Spec> = dtype_flow::passes_through;

}  // namespace typeflow

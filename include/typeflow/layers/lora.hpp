// lora<Rank, Alpha>: a low-rank adapter on a layer's kernels (Hu et al.,
// "LoRA", 2021), as Keras 3's Dense(units, lora_rank=Rank, lora_alpha=Alpha).
//
//   dense<512, lora<8>>                         the MLP's projections of a GPT block
//   causal_self_attention<12, lora<8, 16>>      attention's qkv and proj
//
// A kernel W (in, out) becomes frozen (frozen_param: no gradient, no
// optimizer slot, memory_plan.hpp) and two small matrices are trained beside
// it, A (in, Rank) from he_uniform and B (Rank, out) from zeros, so that the
// adapted layer starts as the pretrained one:
//
//   y = x · W + b + (Alpha / Rank) · (x · A) · B
//
// The bias stays trained, as Keras's enable_lora leaves it. A and B are named
// after the kernel, "<scope>lora_kernel_a" and "...lora_kernel_b" (Keras's
// names): "blocks.3.attn.qkv.lora_kernel_a". merge_lora (io/lora_merge.hpp)
// folds them into the kernel: W + (Alpha / Rank) · A · B, for a model of the
// same layers without lora<>.
//
// The adapter runs in float32 also under a 16-bit policy (its products are
// (rows, Rank) thin), after the layer's own product and before its output is
// rounded or stored. A dense with an adapter does not fuse the activation
// after it into its matmul (the adapter's term comes before the activation).
// Both devices: backend/cpu/lora.hpp and backend/cuda/lora.hpp run the
// adapter's products.
#pragma once

#include <string>
#include <type_traits>

#include "typeflow/core/fixed_string.hpp"
#include "typeflow/initializers/initializers.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {

template <int Rank, int Alpha = Rank>
struct lora {
  static_assert(Rank > 0, "lora<Rank, Alpha>: Rank, the adapter's inner width, must be positive");
  static_assert(Alpha > 0, "lora<Rank, Alpha>: Alpha must be positive (the adapter is scaled by Alpha / Rank)");
  static constexpr int rank = Rank;
  static constexpr int alpha = Alpha;
  static constexpr float scale = static_cast<float>(Alpha) / static_cast<float>(Rank);
  using type = lora;
  static std::string name() { return "lora<" + std::to_string(Rank) + ", " + std::to_string(Alpha) + ">"; }
};

namespace detail {

template <class Option>
inline constexpr bool is_lora_option = false;
template <int R, int A>
inline constexpr bool is_lora_option<lora<R, A>> = true;

template <class... Options>
struct find_lora {
  using type = void;
};
template <class First, class... Rest>
struct find_lora<First, Rest...> {
  using type = std::conditional_t<is_lora_option<First>, First, typename find_lora<Rest...>::type>;
};

}  // namespace detail

// The lora<> among Options, or void.
template <class... Options>
using lora_option_t = typename detail::find_lora<Options...>::type;
template <class... Options>
inline constexpr int lora_option_count = (0 + ... + int{detail::is_lora_option<Options>});

// What a layer's options say about its adapter: lora<R, A> or void, whether
// there is one, its rank (0 without), and a lora<> to name in branches not taken.
template <class... Options>
struct lora_of {
  using type = lora_option_t<Options...>;
  static constexpr bool enabled = !std::is_void_v<type>;
  using or_unit = std::conditional_t<enabled, type, lora<1>>;
  static constexpr int rank = enabled ? or_unit::rank : 0;
};

// A LoRA matrix: trained, of kind kernel (weight decay applies, as to the
// kernel it adapts), with the adapter's scale and the kernel it belongs to,
// so that merge_lora can fold it.
template <fixed_string Name, class Shape, class Initializer, float Scale>
struct lora_param : param<Name, Shape, Initializer, param_kind::kernel> {
  static constexpr bool is_lora = true;
  static constexpr float lora_scale = Scale;
};

// The adapter's two tensors for a kernel of shape (In, Out): A (In, Rank)
// and B (Rank, Out).
template <class Lora, fixed_string Name, int In>
using lora_a_param = lora_param<Name, shape<In, Lora::rank>, initializers::he_uniform, Lora::scale>;
template <class Lora, fixed_string Name, int Out>
using lora_b_param = lora_param<Name, shape<Lora::rank, Out>, initializers::zeros, Lora::scale>;
// What an adapter of Rank on a product of Rows rows keeps: x · A and, in
// backward, d_y · B^T, (Rows, Rank) each, 64-byte aligned.
constexpr std::size_t lora_buffer_bytes(std::size_t rows, int rank) {
  return align_up(rows * static_cast<std::size_t>(rank) * sizeof(float));
}

}  // namespace typeflow

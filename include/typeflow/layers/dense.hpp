// dense<Units>: y = x · kernel + bias over the last axis, as Keras's Dense.
//
//   input   (B, ..., in)
//   kernel  (in, Units)     glorot_uniform
//   bias    (Units,)        zeros
//   output  (B, ..., Units)
//
// Options: kernel_initializer<I>, bias_initializer<I>, kernel_regularizer<R>,
// bias_regularizer<R>, lora<Rank, Alpha> (a low-rank adapter on a frozen
// kernel, layers/lora.hpp), and a dtype (float32, float16, bfloat16) that overrides
// the policy's compute dtype for this layer, e.g.
// dense<64, kernel_initializer<initializers::he_normal>> or dense<10, float32>.
//
// When a relu, tanh or sigmoid follows, it runs inside the matmul as its
// epilogue and the activation layer only applies its derivative in backward;
// on the GPU gelu_tanh too, its derivative then applied by the dense.
//
// In a 16-bit compute dtype (mixed_float16, mixed_bfloat16) the kernel stays
// float32 (the master weights) and the product sees it, the input, the output
// and every gradient in 16 bits, with float32 accumulation; the output is
// stored in 16 bits when the layers after it read 16 bits. The executors:
// backend/cpu/dense.hpp (oneDNN), backend/cuda/layers.hpp (cuBLASLt).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>

#include "typeflow/initializers/initializers.hpp"
#include "typeflow/layers/activation_traits.hpp"
#include "typeflow/layers/lora.hpp"
#include "typeflow/layers/options.hpp"
#include "typeflow/contract/layer.hpp"
#include "typeflow/precision/policy.hpp"

namespace typeflow {

template <int Units, class... Options>
struct dense {
  static constexpr std::string_view scope_name = "dense";
  // "dense<64>", "dense<10, float32>" (a dtype is shown), "dense<64, ...>".
  static std::string type_name() {
    std::string name = "dense<" + std::to_string(Units);
    if constexpr (dtype_option_count<Options...> == 1)
      name += ", " + std::string(dtype_option_t<float32, Options...>::name);
    if constexpr (lora_option_count<Options...> == 1) name += ", " + lora_option_t<Options...>::name();
    if constexpr (sizeof...(Options) >
                  static_cast<std::size_t>(dtype_option_count<Options...> + lora_option_count<Options...>))
      name += ", ...";
    return name + ">";
  }

  template <class In, class Context>
  struct bind : layer_defaults {
    static_assert(layer_check<layer_at<Context::position, dense>, given<In>, (Units > 0)>::passed,
                  "dense<Units>: Units, the number of output features, must be positive");
    static_assert(layer_check<layer_at<Context::position, dense>, given<In>, (In::rank >= 1)>::passed,
                  "dense<Units>: the input needs at least one axis; dense works over the last one");
    static_assert(layer_check<layer_at<Context::position, dense>, given<In>,
                              ((detail::is_known_option<Options> || detail::is_dtype_option<Options> ||
                                detail::is_lora_option<Options>) &&
                               ...)>::passed,
                  "dense<Units, Options...>: each option must be kernel_initializer<>, bias_initializer<>, "
                  "kernel_regularizer<>, bias_regularizer<>, lora<> or a dtype (float32, float16, bfloat16)");
    static_assert(layer_check<layer_at<Context::position, dense>, given<In>,
                              option_count<kernel_initializer, Options...> <= 1 &&
                                  option_count<bias_initializer, Options...> <= 1 &&
                                  option_count<kernel_regularizer, Options...> <= 1 &&
                                  option_count<bias_regularizer, Options...> <= 1 &&
                                  dtype_option_count<Options...> <= 1 && lora_option_count<Options...> <= 1>::passed,
                  "dense<Units, Options...>: each kind of option may be given once");
    using input_dtype = typename Context::precision::input;
    static_assert(layer_check<layer_at<Context::position, dense>, given<In, input_dtype>,
                              !std::is_same_v<input_dtype, int32>>::passed,
                  "dense<Units>: the input holds int32 token ids; put an embedding<Vocab, Dim> before the dense");

    using compute_dtype = dtype_option_t<typename Context::precision::compute, Options...>;
    static constexpr bool low_precision = precision::is_16bit_v<compute_dtype>;
    using output_dtype =
        std::conditional_t<low_precision && Context::precision::hand_on_compute, compute_dtype, float32>;

    static constexpr int units = Units > 0 ? Units : 1;  // keeps one error per mistake
    static constexpr int in_features = In::template dim<-1>;
    static constexpr std::size_t rows_per_sample = In::size / static_cast<std::size_t>(in_features);
    using input_shape = In;
    using output_shape = replace_last_t<In, units>;
    using kernel_shape = shape<in_features, units>;
    using kernel_param = param<"kernel", kernel_shape, option_t<kernel_initializer, initializers::glorot_uniform, Options...>,
                               param_kind::kernel, option_t<kernel_regularizer, regularizers::none, Options...>>;
    using bias_param = param<"bias", shape<units>, option_t<bias_initializer, initializers::zeros, Options...>,
                             param_kind::bias, option_t<bias_regularizer, regularizers::none, Options...>>;
    // With lora<>: the kernel frozen, then the bias, A and B trained.
    using lora_type = typename lora_of<Options...>::or_unit;
    static constexpr bool with_lora = lora_of<Options...>::enabled;
    static constexpr int lora_rank = lora_of<Options...>::rank;
    using params = std::conditional_t<
        with_lora,
        param_list<frozen_param<kernel_param>, bias_param, lora_a_param<lora_type, "lora_kernel_a", in_features>,
                   lora_b_param<lora_type, "lora_kernel_b", units>>,
        param_list<kernel_param, bias_param>>;
    static constexpr std::size_t flops_per_sample =
        2 * rows_per_sample * in_features * units +
        (with_lora ? 2 * rows_per_sample * std::size_t{lora_rank} * (in_features + units) : 0);
    // The adapter's term comes before an activation: no fused epilogue then.
    static constexpr epilogue fused =
        with_lora ? epilogue::none : epilogue_between<dense, typename Context::next, Context::gpu>;
    // A GPU dense that fuses gelu_tanh keeps its product (the pre-activation,
    // stored as its output) in the workspace for the backward's gelu'.
    static constexpr std::size_t gelu_input_bytes_per_sample =
        fused == epilogue::gelu_tanh ? rows_per_sample * units * sizeof(typename output_dtype::value_type) : 0;
    // The CPU's native bf16 products (backend/cpu/dense.hpp; chosen at run
    // time): not with lora<>, whose adapter adds in float32, nor with a
    // float16 input. Their bf16 kernel, and the bf16 input when the input
    // arrives in float32, are converted in forward and kept for backward.
    // Bound for a GPU (Context::gpu) none of the CPU's copies below exist:
    // cuBLASLt reads 16-bit operands, kept in a scratchpad of the executor's
    // own (backend/cuda/layers.hpp); its workspace holds lora<>'s buffers only.
    static constexpr bool native_bf16_possible = std::is_same_v<compute_dtype, bfloat16> && !with_lora &&
                                                 !std::is_same_v<input_dtype, float16> && !Context::gpu;
    static constexpr bool keeps_bf16_input = native_bf16_possible && !std::is_same_v<input_dtype, bfloat16>;
    static constexpr std::size_t kernel_floats = aligned_floats(std::tuple_element_t<0, typename params::tuple>::stored_floats);
    static constexpr std::size_t bias_floats = aligned_floats(units);
    // Workspace: the adapter's x · A (forward to backward) and d_y · B^T, or
    // the native path's bf16 kernel and input, or a fused gelu_tanh's input.
    static constexpr std::size_t workspace_bytes_per_sample =
        with_lora          ? 2 * rows_per_sample * std::size_t{lora_rank} * sizeof(float)
        : keeps_bf16_input ? rows_per_sample * in_features * std::size_t{2}
                           : gelu_input_bytes_per_sample;
    static constexpr std::size_t workspace_bytes_per_step =
        with_lora              ? 2 * arena_alignment
        : native_bf16_possible ? align_up(kernel_floats * 2) + (keeps_bf16_input ? arena_alignment : 0)
                               : 0;

    // The emulated 16 bits, all in scratch (rounded again in backward, which
    // costs one pass over the kernel and keeps nothing between the passes):
    // the input rounded, the output before it is stored in 16 bits, the
    // kernel and bias rounded (backend/cpu/dense.hpp). The native path needs
    // less here: d_out in bf16 and the bias rounded.
    static constexpr bool stores_16bit = !std::is_same_v<output_dtype, float32>;
    // A 16-bit input is read through a float32 copy, whatever this layer computes in.
    static constexpr bool copies_input = low_precision || !std::is_same_v<input_dtype, float32>;
    static constexpr bool host_scratch = !Context::gpu;
    static constexpr std::size_t scratch_bytes_per_sample =
        copies_input && host_scratch
            ? rows_per_sample * std::max((in_features + (stores_16bit ? units : 0)) * sizeof(float),
                                         (in_features + units) * std::size_t{2})
            : 0;
    static constexpr std::size_t scratch_bytes_per_step =
        host_scratch ? (copies_input ? 3 * arena_alignment : 0) +
                           (low_precision ? (kernel_floats + bias_floats) * sizeof(float) : 0)
                     : 0;
  };
};

// dense converts whatever dtype its input is stored in.
template <int Units, class... Options>
inline constexpr dtype_flow dtype_flow_of<dense<Units, Options...>> = dtype_flow::any;

}  // namespace typeflow

// causal_self_attention<Heads, Options...>: GPT-2's masked multi-head
// self-attention (nanoGPT's CausalSelfAttention), both projections included.
//
//   input        (B, T, D)          D must split evenly into Heads heads
//   qkv.kernel   (D, 3D)  glorot_uniform     qkv.bias   (3D)  zeros
//   proj.kernel  (D, D)   glorot_uniform     proj.bias  (D)   zeros
//   output       (B, T, D)
//
//   qkv = x · qkv.kernel + qkv.bias;  q, k, v = qkv[..., 0:D], [D:2D], [2D:3D]
//   head h (hd = D / Heads) takes columns h*hd .. (h+1)*hd - 1 of q, k and v:
//     P_h = softmax(q_h k_h^T / sqrt(hd)), position t attending to 0..t only
//     y_h = dropout(P_h) v_h
//   out = concat_h(y_h) · proj.kernel + proj.bias
//
// Kernels are (in, out), as dense's: torch.nn.Linear's weight transposed.
//
// Options: attention_dropout<Rate> drops attention probabilities while
// training (inverted scaling; the mask is a pure function of the model seed,
// the layer's salt (its position, or its place inside a block), the step and
// the element, as dropout's), and
// kernel_initializer<>, bias_initializer<>, kernel_regularizer<>,
// bias_regularizer<>, which apply to both projections, and lora<Rank, Alpha>:
// both projections' kernels frozen, each with a trained low-rank adapter
// (layers/lora.hpp; "qkv.lora_kernel_a" (D, Rank), "qkv.lora_kernel_b"
// (Rank, 3D), "proj.lora_kernel_a", "proj.lora_kernel_b").
//
// The executors: backend/cpu/attention.hpp (oneDNN projections and
// register-blocked per-head kernels; bf16 ones in attention_bf16_kernels.hpp).
//
// Memory. The workspace keeps what backward reads: qkv (B, T, 3D), the
// probabilities P (B, H, T, T) before dropout, the heads' concatenation y
// (B, T, D), and with attention_dropout a byte mask (B, H, T, T). The rows of
// P are padded like a parameter's (padded_row_length), which keeps a column
// walk down P off a handful of cache sets. The shared scratch holds d_y and
// d_qkv (B, T, D and 3D), and per thread (at most head_slots of them) one
// head's d_S (or, with dropout, its dropped-out P) and packed panels, which
// stay in that core's cache from one head to the next (with native bf16
// products, the same in pairs of bf16: see slot_bytes).
//
// Decoding (Context::decode_length > 0, In = (1, D)): each call feeds one
// position, run_state::position, per sample. The workspace holds a key and a
// value cache of decode_length positions per sample; forward() writes the
// position's k and v there and attends over positions 0..position.
// backward() does nothing: a decoder is never trained.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "typeflow/initializers/initializers.hpp"
#include "typeflow/layers/lora.hpp"
#include "typeflow/layers/options.hpp"
#include "typeflow/contract/layer.hpp"
#include "typeflow/precision/policy.hpp"

namespace typeflow {

// causal_self_attention's option: the probability of dropping an attention
// weight while training, e.g. causal_self_attention<6, attention_dropout<0.1f>>.
template <float Rate>
struct attention_dropout {
  static constexpr float rate = Rate;
  using type = attention_dropout;  // as every option has (option_t reads each one's)
};

namespace detail {

template <class Option>
inline constexpr bool is_attention_dropout = false;
template <float Rate>
inline constexpr bool is_attention_dropout<attention_dropout<Rate>> = true;

template <class Option>
constexpr float attention_dropout_rate() {
  if constexpr (is_attention_dropout<Option>) return Option::rate;
  else return 0.f;
}

}  // namespace detail

template <int Heads, class... Options>
struct causal_self_attention {
  static constexpr float dropout_rate = (0.f + ... + detail::attention_dropout_rate<Options>());
  // Its parameters' scope inside a block: "blocks.3.attn.qkv.kernel".
  static constexpr std::string_view scope_name = "attn";

  static std::string type_name() {
    return "causal_self_attention<" + std::to_string(Heads) + (sizeof...(Options) ? ", ...>" : ">");
  }

  template <class In, class Context>
  struct bind : layer_defaults {
    static_assert(layer_check<layer_at<Context::position, causal_self_attention>, given<In>, (Heads > 0)>::passed,
                  "causal_self_attention<Heads>: Heads, the number of attention heads, must be positive");
    static_assert(layer_check<layer_at<Context::position, causal_self_attention>, given<In>, (In::rank == 2)>::passed,
                  "causal_self_attention<Heads>: the input must be (T, D) per sample: a sequence of T positions of "
                  "width D");
    static_assert(layer_check<layer_at<Context::position, causal_self_attention>, given<In>,
                              ((detail::is_attention_dropout<Options> || detail::is_known_option<Options> ||
                                detail::is_lora_option<Options>) &&
                               ...)>::passed,
                  "causal_self_attention<Heads, Options...>: each option must be attention_dropout<>, "
                  "kernel_initializer<>, bias_initializer<>, kernel_regularizer<>, bias_regularizer<> or lora<>");
    static_assert(layer_check<layer_at<Context::position, causal_self_attention>, given<In>,
                              ((0 + ... + int{detail::is_attention_dropout<Options>}) <= 1 &&
                               option_count<kernel_initializer, Options...> <= 1 &&
                               option_count<bias_initializer, Options...> <= 1 &&
                               option_count<kernel_regularizer, Options...> <= 1 &&
                               option_count<bias_regularizer, Options...> <= 1 && lora_option_count<Options...> <= 1)>::passed,
                  "causal_self_attention<Heads, Options...>: each kind of option may be given once");
    static_assert(layer_check<layer_at<Context::position, causal_self_attention>, given<In>,
                              (dropout_rate >= 0.f && dropout_rate < 1.f)>::passed,
                  "attention_dropout<Rate>: Rate is the fraction of attention weights dropped and must lie in "
                  "[0, 1)");

    static constexpr int heads = Heads > 0 ? Heads : 1;  // keeps one error per mistake
    static constexpr int steps = [] {
      if constexpr (In::rank == 2) return In::template dim<0>;
      else return 1;
    }();
    static constexpr int width = [] {
      if constexpr (In::rank == 2) return In::template dim<1>;
      else return heads;
    }();
    static_assert(layer_check<layer_at<Context::position, causal_self_attention>, given<In>,
                              (width % heads == 0)>::passed,
                  "causal_self_attention<Heads>: the width D must split evenly into Heads heads (D % Heads != 0)");
    static constexpr int head_width = width % heads == 0 ? width / heads : 1;

    // Decoding: one position per call against a cache of decode_length.
    static constexpr int decode_length = Context::decode_length;
    static constexpr bool decoding = decode_length > 0;
    static_assert(layer_check<layer_at<Context::position, causal_self_attention>, given<In>,
                              (!decoding || steps == 1)>::passed,
                  "causal_self_attention<Heads>: a decoder feeds one position per call, an input of (1, D)");
    static constexpr bool with_dropout = dropout_rate > 0.f && !decoding;
    static constexpr float attention_dropout_rate = dropout_rate;  // attention_dropout's rate, or 0

    using input_shape = In;
    using output_shape = In;
    using qkv_kernel_param = param<"qkv.kernel", shape<width, 3 * width>,
                                   option_t<kernel_initializer, initializers::glorot_uniform, Options...>,
                                   param_kind::kernel, option_t<kernel_regularizer, regularizers::none, Options...>>;
    using qkv_bias_param = param<"qkv.bias", shape<3 * width>, option_t<bias_initializer, initializers::zeros, Options...>,
                                 param_kind::bias, option_t<bias_regularizer, regularizers::none, Options...>>;
    using proj_kernel_param = param<"proj.kernel", shape<width, width>,
                                    option_t<kernel_initializer, initializers::glorot_uniform, Options...>,
                                    param_kind::kernel, option_t<kernel_regularizer, regularizers::none, Options...>>;
    using proj_bias_param = param<"proj.bias", shape<width>, option_t<bias_initializer, initializers::zeros, Options...>,
                                  param_kind::bias, option_t<bias_regularizer, regularizers::none, Options...>>;
    // With lora<>: both kernels frozen, the biases and the four adapter
    // matrices trained (parameters 4..7).
    using lora_type = typename lora_of<Options...>::or_unit;
    static constexpr bool with_lora = lora_of<Options...>::enabled;
    static constexpr int lora_rank = lora_of<Options...>::rank;
    using params = std::conditional_t<
        with_lora,
        param_list<frozen_param<qkv_kernel_param>, qkv_bias_param, frozen_param<proj_kernel_param>, proj_bias_param,
                   lora_a_param<lora_type, "qkv.lora_kernel_a", width>, lora_b_param<lora_type, "qkv.lora_kernel_b", 3 * width>,
                   lora_a_param<lora_type, "proj.lora_kernel_a", width>, lora_b_param<lora_type, "proj.lora_kernel_b", width>>,
        param_list<qkv_kernel_param, qkv_bias_param, proj_kernel_param, proj_bias_param>>;

    // The positions a query attends over, at most.
    static constexpr std::size_t keys = decoding ? decode_length : steps;
    // Per sample: the projections (8 T D^2) and the two attention products
    // over the full T x T square (4 T^2 D; the masked half is skipped at run
    // time, but counted, as nanoGPT's and PaLM's MFU formulas do).
    static constexpr std::size_t flops_per_sample =
        8 * std::size_t{steps} * width * width + 4 * std::size_t{steps} * keys * width +
        (with_lora ? 2 * std::size_t{steps} * lora_rank * (2 * width + 4 * width) : 0);

    // Under a 16-bit policy (not with lora<>, whose adapters add in float32)
    // the layer computes in 16 bits: its products read 16-bit operands and
    // accumulate in float32 (below).
    using compute_dtype = std::conditional_t<with_lora, float32, typename Context::precision::compute>;
    static constexpr bool low_precision = precision::is_16bit_v<compute_dtype>;
    static constexpr bool native_bf16_possible = std::is_same_v<compute_dtype, bfloat16>;

    // Row stride of P and d_S.
    static constexpr std::size_t score_stride = padded_row_length(steps);
    // The floats one head's packed panels take: the larger of a (hd x T) and
    // a (T x hd) matrix packed by panel_width columns, as the CPU executor
    // packs them (backend/cpu/attention.hpp).
    static constexpr int panel_width = 16;
    static constexpr std::size_t pack_floats = std::max(std::size_t{head_width} * align_up(steps, panel_width),
                                                        std::size_t{steps} * align_up(head_width, panel_width));

    // Workspace per sample (training and evaluation): qkv, P, y, the mask.
    static constexpr std::size_t qkv_bytes = align_up(sizeof(float) * steps * 3 * width);
    static constexpr std::size_t probability_bytes = align_up(sizeof(float) * heads * steps * score_stride);
    static constexpr std::size_t concat_bytes = align_up(sizeof(float) * steps * width);
    static constexpr std::size_t mask_bytes = with_dropout ? align_up(std::size_t{heads} * steps * steps) : 0;
    // Scratch per sample: d_y, d_qkv and the sample's share of d qkv.bias;
    // per step, a slot for each thread working on a head: its d_S (or P after
    // dropout) and its four packed matrices. Up to head_slots threads share
    // the heads (more cores than that leave the rest to the projections).
    static constexpr int head_slots = 32;
    static constexpr std::size_t bias_share_bytes = align_up(sizeof(float) * 3 * width);
    static constexpr std::size_t slot_scores_floats = aligned_floats(std::size_t{steps} * score_stride);
    // With native bf16 products (below) the per-head products take pair words
    // (backend/cpu/attention_bf16_kernels.hpp), and a slot holds instead:
    // P after dropout transposed, then d_S transposed (pairs(T) x T words);
    // a row block of d_S in float32; a row block of P or d_S and one of q or
    // d_y in pair words; four matrices packed as pair panels.
    static constexpr int row_block = 6;  // the kernels' rows per tile
    static constexpr std::size_t step_pairs = (std::size_t{steps} + 1) / 2;
    static constexpr std::size_t head_pairs = (std::size_t{head_width} + 1) / 2;
    static constexpr std::size_t pair_pack_words = aligned_floats(std::max(
        head_pairs * align_up(steps, panel_width), step_pairs * align_up(head_width, panel_width)));
    static constexpr std::size_t transposed_words = aligned_floats(step_pairs * steps);
    static constexpr std::size_t native_slot_words =
        native_bf16_possible ? transposed_words + aligned_floats(row_block * score_stride) +
                                   aligned_floats(row_block * step_pairs) + aligned_floats(row_block * head_pairs) +
                                   4 * pair_pack_words
                             : 0;
    static constexpr std::size_t slot_bytes =
        align_up(sizeof(float) * std::max(slot_scores_floats + 4 * pack_floats, native_slot_words));

    // Decoding: the key and value caches, (decode_length, D) each per sample;
    // scratch for the position's qkv, y and each head's scores.
    static constexpr std::size_t cache_floats = std::size_t{decode_length} * width;
    static constexpr std::size_t decode_qkv_bytes = align_up(sizeof(float) * 3 * width);
    static constexpr std::size_t decode_concat_bytes = align_up(sizeof(float) * width);
    static constexpr std::size_t decode_score_bytes = align_up(sizeof(float) * heads * keys);

    // Bound for a GPU (Context::gpu), the executor runs attention fused
    // (backend/cuda/attention_executor.hpp): it keeps qkv, y and each row's
    // softmax statistics (max and sum per head) from forward to backward,
    // never P nor a dropout mask (GPT-2 124M at 16 x 1024 tokens: 9.8 GB of
    // P less over its 12 layers), and its scratch in a scratchpad of its
    // own; each of its parts starts on a 256-byte boundary (per step below).
    static constexpr bool fused = Context::gpu;
    static constexpr std::size_t statistics_bytes = align_up(sizeof(float) * 2 * heads * steps);

    // With lora<>, after the rest: each adapter's x · A and d_y · B^T,
    // (rows, Rank) each (backend/cpu/lora.hpp).
    static constexpr std::size_t own_workspace_bytes_per_sample =
        decoding ? 2 * cache_floats * sizeof(float)
        : fused  ? qkv_bytes + concat_bytes + statistics_bytes
                 : qkv_bytes + probability_bytes + concat_bytes + mask_bytes;
    static constexpr std::size_t own_scratch_bytes_per_sample =
        fused      ? 0
        : decoding ? decode_qkv_bytes + decode_concat_bytes + decode_score_bytes
                   : concat_bytes + qkv_bytes + bias_share_bytes;
    static constexpr std::size_t own_scratch_bytes_per_step = decoding || fused ? 0 : head_slots * slot_bytes;

    // Under a 16-bit policy the two projections are 16-bit products, as
    // dense's (their inputs, weights, outputs and gradients rounded, float32
    // accumulation), and so are the per-head products: q, k, v, P after
    // dropout, d_y and d_S are rounded before they enter one, as Keras's
    // MultiHeadAttention computes them in the compute dtype; softmax and
    // its backward run in float32 on those values. With native bf16 products
    // the per-head products run as vdpbf16ps on pair words (the slot above),
    // elsewhere in float32 on the rounded values. After the scratch above, the CPU keeps
    // the rounded operands (backend/cpu/attention.hpp): per row, float32 x
    // when emulated, or bf16 d_out and d_qkv when native; per step, the
    // rounded biases, and the rounded kernels when emulated. With native bf16
    // products forward converts the kernels, x and y to bf16 in the
    // workspace, after its own (and no lora's), where backward reads them.
    static constexpr std::size_t rows_per_sample = decoding ? 1 : steps;
    static constexpr std::size_t qkv_kernel_floats =
        aligned_floats(std::tuple_element_t<0, typename params::tuple>::stored_floats);
    static constexpr std::size_t proj_kernel_floats =
        aligned_floats(std::tuple_element_t<2, typename params::tuple>::stored_floats);
    static constexpr std::size_t operands_16bit_bytes_per_sample =
        low_precision && !fused ? rows_per_sample * std::size_t{8} * width : 0;
    static constexpr std::size_t weights_16bit_bytes =
        low_precision && !fused
            ? (qkv_kernel_floats + proj_kernel_floats + aligned_floats(3 * width) + aligned_floats(width)) * sizeof(float) +
                  8 * arena_alignment
            : 0;
    static constexpr std::size_t scratch_bytes_per_sample = own_scratch_bytes_per_sample + operands_16bit_bytes_per_sample;
    static constexpr std::size_t scratch_bytes_per_step = own_scratch_bytes_per_step + weights_16bit_bytes;
    static constexpr std::size_t kept_bf16_bytes_per_sample =
        native_bf16_possible && !fused ? rows_per_sample * 4 * width : 0;
    static constexpr std::size_t kept_bf16_bytes_per_step =
        native_bf16_possible && !fused ? align_up(qkv_kernel_floats * 2) + align_up(proj_kernel_floats * 2) + 3 * arena_alignment
                             : 0;
    static constexpr std::size_t workspace_bytes_per_sample =
        own_workspace_bytes_per_sample + (with_lora ? 4 * std::size_t{steps} * lora_rank * sizeof(float) : 0) +
        kept_bf16_bytes_per_sample;
    static constexpr std::size_t workspace_bytes_per_step =
        (with_lora ? 5 * arena_alignment : 0) + kept_bf16_bytes_per_step + (fused && !decoding ? 8 * 256 : 0);
  };
};

}  // namespace typeflow

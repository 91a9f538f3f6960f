// Token and position embeddings, and logits that reuse the token embedding.
//
//   embedding<Vocab, Dim>        (T) int32 ids -> (T, Dim): row id of the
//                                (Vocab, Dim) matrix "embeddings", as Keras's
//                                Embedding; it must follow the int32 input
//   positional_embedding<MaxLen> (T, Dim) -> (T, Dim): adds a learned row per
//                                position, T <= MaxLen
//   tied_logits                  (T, Dim) -> (T, Vocab): x · embeddingsᵀ, the
//                                output projection tied to the network's
//                                embedding<Vocab, Dim> (GPT-2's weight tying;
//                                no parameters of its own)
//
// An id outside [0, Vocab) stops the step with std::out_of_range naming the
// id, the sample and the position; nothing is written before the check.
// Options: embeddings_initializer<I> (default random_uniform<-0.05f, 0.05f>,
// as Keras; GPT-2 uses random_normal<0.02f>). The executors:
// backend/cpu/embedding.hpp, backend/cuda/layers.hpp (which the GPU engine's
// host-side check_token_ids guards).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "typeflow/core/dtype.hpp"
#include "typeflow/core/id_range.hpp"
#include "typeflow/initializers/initializers.hpp"
#include "typeflow/layers/input.hpp"
#include "typeflow/layers/options.hpp"
#include "typeflow/contract/layer.hpp"
#include "typeflow/precision/policy.hpp"

namespace typeflow {

template <class Initializer>
struct embeddings_initializer {
  using type = Initializer;
};

namespace detail {
template <class Spec>
inline constexpr bool is_int32_input = false;
template <int... Dims>
inline constexpr bool is_int32_input<typed_input<int32, Dims...>> = true;

template <class Option>
inline constexpr bool is_embedding_option = is_option_of<embeddings_initializer, Option>;
}  // namespace detail

template <int Vocab, int Dim, class... Options>
struct embedding {
  static constexpr std::string_view scope_name = "embedding";
  static std::string type_name() { return "embedding<" + std::to_string(Vocab) + ", " + std::to_string(Dim) + ">"; }
  static constexpr int vocabulary = Vocab;
  static constexpr int width = Dim;

  template <class In, class Context>
  struct bind : layer_defaults {
    static_assert(layer_check<layer_at<Context::position, embedding>, given<In>, (Vocab > 0 && Dim > 0)>::passed,
                  "embedding<Vocab, Dim>: the vocabulary size and the width must be positive");
    static_assert(layer_check<layer_at<Context::position, embedding>, given<In>,
                              (detail::is_embedding_option<Options> && ...)>::passed,
                  "embedding<Vocab, Dim, Options...>: the only option is embeddings_initializer<>");
    static_assert(layer_check<layer_at<Context::position, embedding>, given<In>,
                              detail::is_int32_input<typename Context::previous>>::passed,
                  "embedding<Vocab, Dim>: the layer must come right after an int32 input of token ids, "
                  "e.g. typed_input<int32, T>");
    static_assert(layer_check<layer_at<Context::position, embedding>, given<In>, In::rank == 1>::passed,
                  "embedding<Vocab, Dim>: the input is a sequence of ids, shape (T,)");

    static constexpr int vocab = Vocab > 0 ? Vocab : 1;
    static constexpr int dim = Dim > 0 ? Dim : 1;
    static constexpr int length = In::template dim<0>;
    using input_shape = In;
    using output_shape = shape<length, dim>;
    using table = param<"embeddings", shape<vocab, dim>,
                        option_t<embeddings_initializer, initializers::random_uniform<-0.05f, 0.05f>, Options...>,
                        param_kind::embedding>;
    using params = param_list<table>;
    static constexpr bool embedding_matrix = true;  // tied_logits finds the matrix by this
  };
};

template <int MaxLen, class... Options>
struct positional_embedding {
  static constexpr std::string_view scope_name = "positional_embedding";
  static std::string type_name() { return "positional_embedding<" + std::to_string(MaxLen) + ">"; }

  template <class In, class Context>
  struct bind : layer_defaults {
    static_assert(layer_check<layer_at<Context::position, positional_embedding>, given<In>, (MaxLen > 0)>::passed,
                  "positional_embedding<MaxLen>: MaxLen, the longest sequence, must be positive");
    static_assert(layer_check<layer_at<Context::position, positional_embedding>, given<In>,
                              (detail::is_embedding_option<Options> && ...)>::passed,
                  "positional_embedding<MaxLen, Options...>: the only option is embeddings_initializer<>");
    static_assert(layer_check<layer_at<Context::position, positional_embedding>, given<In>, In::rank == 2>::passed,
                  "positional_embedding<MaxLen>: the input must be (T, Dim), one vector per position");
    static constexpr int length = In::template dim<0>;
    static constexpr int dim = In::template dim<-1>;
    static constexpr int max_len = MaxLen > 0 ? MaxLen : 1;
    static_assert(layer_check<layer_at<Context::position, positional_embedding>, given<In>,
                              (length <= max_len)>::passed,
                  "positional_embedding<MaxLen>: the sequence is longer than MaxLen positions");

    using input_shape = In;
    using output_shape = In;
    using table = param<"embeddings", shape<max_len, dim>,
                        option_t<embeddings_initializer, initializers::random_uniform<-0.05f, 0.05f>, Options...>,
                        param_kind::embedding>;
    using params = param_list<table>;
    static constexpr bool gradient_in_place = true;  // d_in = d_out
    static constexpr std::size_t flops_per_sample = In::size;
    // Decoding one position at a time: the position comes from run_state.
    static constexpr bool decoding = Context::decode_length > 0;
  };
};

// Every id of (rows) tokens, `length` a sample, lies in [0, Vocab); else
// std::out_of_range naming the first that does not, by sample and position.
template <int Vocab, int Dim>
void check_token_ids(const std::int32_t* ids, std::ptrdiff_t rows, int length) {
  const std::ptrdiff_t r = first_outside(ids, rows, Vocab);
  if (r >= 0)
    throw std::out_of_range("embedding<" + std::to_string(Vocab) + ", " + std::to_string(Dim) + ">: token id " +
                            std::to_string(ids[r]) + " at sample " + std::to_string(r / length) + ", position " +
                            std::to_string(r % length) + " is outside the vocabulary [0, " + std::to_string(Vocab) +
                            ")");
}

namespace detail {
template <class Spec>
inline constexpr bool is_embedding_spec = false;
template <int V, int D, class... O>
inline constexpr bool is_embedding_spec<embedding<V, D, O...>> = true;

// The first embedding<V, D> among a network's specs (void if none).
template <class Specs>
struct first_embedding {
  using type = void;
};
template <class First, class... Rest>
struct first_embedding<std::tuple<First, Rest...>> {
  using type = std::conditional_t<is_embedding_spec<First>, First,
                                  typename first_embedding<std::tuple<Rest...>>::type>;
};

// The first bound embedding among a network's bound layers (Net::layers, a
// sequential's), whose ids a device checks on the host: void if none.
template <class Layers>
struct first_embedding_layer {
  using type = void;
};
template <class First, class... Rest>
struct first_embedding_layer<std::tuple<First, Rest...>> {
  using type = std::conditional_t<requires { First::embedding_matrix; }, First,
                                  typename first_embedding_layer<std::tuple<Rest...>>::type>;
};
template <class Net>
struct token_embedding_of {
  using type = void;
};
template <class Net>
  requires requires { typename Net::layers; }
struct token_embedding_of<Net> {
  using type = typename first_embedding_layer<typename Net::layers>::type;
};
}  // namespace detail

// A batch's features, where Net's first layer reads them as token ids (a
// sequential network starting with an embedding, int32 features): checked
// on the host, as the CPU layer checks them, by a device whose kernels
// would only give an out-of-range id a zero row. Nothing for other networks.
template <class Net, class Batch>
void check_token_ids_of(const Batch& batch) {
  using layer = typename detail::token_embedding_of<Net>::type;
  using feature = std::remove_cvref_t<decltype(*batch.features.data())>;
  if constexpr (!std::is_void_v<layer> && std::is_same_v<feature, std::int32_t>)
    check_token_ids<layer::vocab, layer::dim>(batch.features.data(),
                                              static_cast<std::ptrdiff_t>(Batch::size) * layer::length, layer::length);
}

struct tied_logits {
  static std::string type_name() { return "tied_logits"; }

  template <class In, class Context>
  struct bind : layer_defaults {
    using source = typename detail::first_embedding<typename Context::specs>::type;
    static_assert(layer_check<layer_at<Context::position, tied_logits>, given<In>,
                              !std::is_void_v<source>>::passed,
                  "tied_logits: the network has no embedding<Vocab, Dim> at its top level to tie the logits to");
    static constexpr int vocab = [] {
      if constexpr (std::is_void_v<source>)
        return 1;
      else
        return source::vocabulary;
    }();
    static constexpr int dim = In::template dim<-1>;
    static_assert(layer_check<layer_at<Context::position, tied_logits>, given<In>, [] {
                    if constexpr (std::is_void_v<source>)
                      return true;
                    else
                      return source::width == dim;
                  }()>::passed,
                  "tied_logits: the input's last axis must equal the embedding's width Dim");
    static constexpr std::size_t rows_per_sample = In::size / static_cast<std::size_t>(dim);
    static constexpr int stride = static_cast<int>(padded_row_length(static_cast<std::size_t>(dim)));
    using input_shape = In;
    using output_shape = replace_last_t<In, vocab>;
    static constexpr bool uses_tied_embedding = true;
    // Bound for a GPU as the network's last layer, the logits' rows (and
    // their gradient's) are stored padded to a multiple of 64 columns
    // (50257 -> 50304), so that the products' leading dimensions are
    // 16-byte aligned, as cuBLASLt's fastest kernels want. The products,
    // the loss, the metrics and the copies to the host use the first
    // `vocab` columns (row_stride apart); the parameters and weights files
    // are unchanged.
    static constexpr bool gpu_head = Context::gpu && !Context::nested && std::is_void_v<typename Context::next>;
    static constexpr int stored_row_length = gpu_head && vocab % 64 != 0 ? (vocab + 63) / 64 * 64 : 0;
    static constexpr int row_stride = stored_row_length > 0 ? stored_row_length : vocab;
    // And there the cross-entropy writes d_logits over the logits (its
    // backward reads d_logits, x and E, never the logits): GPT-2 at 16 x
    // 1024 tokens keeps one logits-sized buffer instead of two (3.1 GiB).
    static constexpr bool loss_gradient_over_output = gpu_head;
    static constexpr std::size_t flops_per_sample = 2 * rows_per_sample * dim * vocab;
    // Under a 16-bit policy the product is a 16-bit one: its operands (the
    // input, the matrix, d_logits) and the gradients it writes are rounded,
    // with float32 accumulation. The logits are not rounded: the loss reads
    // them in full float32 precision (result_dtype; the rule in train/model.hpp),
    // which is what makes a 16-bit head safe. The CPU (backend/cpu/embedding.hpp)
    // holds the rounded operands in scratch as float32 copies when emulated;
    // with native bf16 products forward converts them to bf16 in the
    // workspace, where backward reads them again (d_logits in scratch).
    //
    // But a GPU's head under a bfloat16 compute dtype stores its logits in
    // bf16, and the cross-entropy, reading them in float32 arithmetic, writes
    // d_logits over them in bf16, which the backward's products read as
    // stored (llm.c's classifier): the step's largest tensor in half the
    // bytes (GPT-2 at 16 x 1024 tokens: 1.5 GiB instead of 3.1) and two of
    // its passes gone (the loss's float32 gradient, and its conversion to
    // bf16). bf16 keeps float's range, so the logits neither overflow nor
    // lose more than the products' bf16 operands already cost; float16
    // would overflow, and keeps float32 logits.
    using compute_dtype = typename Context::precision::compute;
    static constexpr bool low_precision = precision::is_16bit_v<compute_dtype>;
    static constexpr bool bf16_logits = gpu_head && std::is_same_v<compute_dtype, bfloat16>;
    using result_dtype = std::conditional_t<bf16_logits, bfloat16, float32>;
    using output_dtype = result_dtype;
    static constexpr std::size_t table_floats = static_cast<std::size_t>(vocab) * static_cast<std::size_t>(stride);
    // Bound for a GPU (Context::gpu) the executor's products need none of
    // this: cuBLASLt rounds its operands, and what it needs lies in a
    // scratchpad of its own (backend/cuda/embedding_executors.hpp).
    static constexpr bool host_operands = low_precision && !Context::gpu;
    static constexpr std::size_t scratch_bytes_per_sample =
        host_operands ? rows_per_sample * std::max(std::size_t(dim) * sizeof(float), std::size_t(vocab + dim) * 2) : 0;
    static constexpr std::size_t scratch_bytes_per_step =
        host_operands ? table_floats * sizeof(float) + 3 * arena_alignment : 0;
    static constexpr bool native_bf16_possible = std::is_same_v<compute_dtype, bfloat16> && !Context::gpu;
    static constexpr std::size_t workspace_bytes_per_sample = native_bf16_possible ? rows_per_sample * dim * 2 : 0;
    static constexpr std::size_t workspace_bytes_per_step =
        native_bf16_possible ? align_up(table_floats * 2) + arena_alignment : 0;
  };
};

}  // namespace typeflow

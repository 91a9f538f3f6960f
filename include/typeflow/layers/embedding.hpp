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
// as Keras; GPT-2 uses random_normal<0.02f>).
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "typeflow/backend/cpu/matmul.hpp"
#include "typeflow/backend/cpu/parallel.hpp"
#include "typeflow/core/dtype.hpp"
#include "typeflow/initializers/initializers.hpp"
#include "typeflow/layers/input.hpp"
#include "typeflow/layers/options.hpp"
#include "typeflow/model/layer.hpp"

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

// d_table[row] += d_out[r] for every r with ids[r] == row; threads split
// the columns, so no two write the same float.
inline void scatter_add_rows(float* table, std::size_t stride, const std::int32_t* ids, const float* d_out,
                             std::ptrdiff_t rows, int dim) {
#pragma omp parallel for schedule(static) if (rows * dim >= backend::cpu::parallel_threshold)
  for (int c0 = 0; c0 < dim; c0 += 32) {
    const int c1 = c0 + 32 < dim ? c0 + 32 : dim;
    for (std::ptrdiff_t r = 0; r < rows; ++r) {
      float* to = table + static_cast<std::size_t>(ids[r]) * stride;
      const float* from = d_out + r * dim;
#pragma omp simd
      for (int c = c0; c < c1; ++c) to[c] += from[c];
    }
  }
}
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

    template <int Batch>
    class executor : public executor_defaults {
      static constexpr std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(Batch) * length;

     public:
      explicit executor(const layer_io& io) : io_(io) {}

      void forward() {
        const auto* ids = reinterpret_cast<const std::int32_t*>(io_.in);
        for (std::ptrdiff_t r = 0; r < rows; ++r)
          if (ids[r] < 0 || ids[r] >= vocab)
            throw std::out_of_range("embedding<" + std::to_string(vocab) + ", " + std::to_string(dim) +
                                    ">: token id " + std::to_string(ids[r]) + " at sample " +
                                    std::to_string(r / length) + ", position " + std::to_string(r % length) +
                                    " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
        const float* weights = io_.params;
        float* out = io_.out;
        backend::cpu::parallel_for(rows, [=](std::ptrdiff_t r) {
          std::memcpy(out + r * dim, weights + static_cast<std::size_t>(ids[r]) * table::row_stride,
                      sizeof(float) * dim);
        });
      }

      // The gradient of the table: d_out's rows added into the rows of
      // their ids. When tied_logits shares the table it has already written
      // its part; otherwise the table's gradient starts from zero.
      void backward() {
        if (!io_.tied_gradient_written) std::memset(io_.grads, 0, sizeof(float) * table::stored_floats);
        detail::scatter_add_rows(io_.grads, table::row_stride, reinterpret_cast<const std::int32_t*>(io_.in),
                                 io_.d_out, rows, dim);
      }

     private:
      layer_io io_;
    };
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

    template <int Batch>
    class executor : public executor_defaults {
     public:
      explicit executor(const layer_io& io) : io_(io) {}

      void forward() {
        const int first = decoding ? io_.run->position : 0;
        if (first < 0 || first + length > max_len)
          throw std::out_of_range("positional_embedding<" + std::to_string(max_len) + ">: position " +
                                  std::to_string(first + length - 1) + " is beyond the table");
        const float* in = io_.in;
        float* out = io_.out;
        const float* table_rows = io_.params + static_cast<std::size_t>(first) * table::row_stride;
        backend::cpu::parallel_for(static_cast<std::ptrdiff_t>(Batch) * length, [=](std::ptrdiff_t r) {
          const float* p = table_rows + static_cast<std::size_t>(r % length) * table::row_stride;
          const float* x = in + r * dim;
          float* y = out + r * dim;
#pragma omp simd
          for (int c = 0; c < dim; ++c) y[c] = x[c] + p[c];
        });
      }

      // d_table[t] = the sum over the batch of d_out[., t]; d_in is d_out.
      void backward() {
        float* grads = io_.grads;
        const float* d_out = io_.d_out;
        std::memset(grads, 0, sizeof(float) * table::stored_floats);
        backend::cpu::parallel_for(static_cast<std::ptrdiff_t>(length), [=](std::ptrdiff_t t) {
          float* g = grads + static_cast<std::size_t>(t) * table::row_stride;
          for (int b = 0; b < Batch; ++b) {
            const float* row = d_out + (static_cast<std::ptrdiff_t>(b) * length + t) * dim;
#pragma omp simd
            for (int c = 0; c < dim; ++c) g[c] += row[c];
          }
        });
      }

     private:
      layer_io io_;
    };
  };
};

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
}  // namespace detail

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
    static constexpr std::size_t flops_per_sample = 2 * rows_per_sample * dim * vocab;

    template <int Batch>
    class executor {
      static constexpr int rows = Batch * static_cast<int>(rows_per_sample);

     public:
      explicit executor(const layer_io& io)
          : io_(io),
            // logits (rows, V) = x (rows, D) · E^T, E stored (V, stride)
            forward_(*io.context, {rows, vocab, dim, false, true, 0, stride}, false),
            // d_E (V, D) = d_logits^T (V, rows) · x (rows, D)
            table_grad_(*io.context, {vocab, dim, rows, true, false, 0, 0, stride}, false),
            // d_x (rows, D) = d_logits (rows, V) · E (V, D)
            input_grad_(*io.context, {rows, dim, vocab, false, false, 0, stride}, false) {}

      std::size_t scratchpad_bytes() const {
        return std::max({forward_.scratchpad_bytes(), table_grad_.scratchpad_bytes(), input_grad_.scratchpad_bytes()});
      }
      void bind(std::byte* scratchpad) {
        forward_.bind(io_.in, io_.tied_params, nullptr, io_.out, scratchpad);
        table_grad_.bind(io_.d_out, io_.in, nullptr, io_.tied_grads, scratchpad);
        if (io_.d_in) input_grad_.bind(io_.d_out, io_.tied_params, nullptr, io_.d_in, scratchpad);
      }
      void forward() { forward_.run(); }
      void backward() {
        table_grad_.run();
        if (io_.d_in) input_grad_.run();
      }

     private:
      layer_io io_;
      backend::cpu::matmul forward_, table_grad_, input_grad_;
    };
  };
};

}  // namespace typeflow

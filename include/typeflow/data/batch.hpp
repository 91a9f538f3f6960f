// batch<N>: packs N consecutive examples into one batch_of, like Dataset.batch.
//
//   source | batch<N>                     element_type = batch_of<N, Features, Label>
//                                         features (N, Features::shape), labels (N, Label::shape)
//                                         cardinality  ceil(n / N), the last partial batch included
//   source | batch<N, remainder::drop>    the same type; a last partial batch is dropped
//                                         (drop_remainder=True), cardinality floor(n / N)
//
// Batches of weighted_example carry their weights in batch_of::sample_weights.
// The batch size is part of the type, so the model can check it at compile
// time. The cursor fills the caller's batch in place: a consumer creates one
// batch_of (its only allocation) and refills it every step. With the default
// remainder::pad, a last, partial batch has valid < N and rows valid..N-1
// zero-filled: its mask is rows [0, valid) (batch_of::is_padding), which
// evaluate and predict honour. next() returns false only when not a single
// sample was left. batch<0> and negative N are a compile error with
// batch_of's sentence: "the batch size N must be positive".
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"
#include "typeflow/data/record.hpp"

namespace typeflow::data {

// What batch<N> does with the samples left over after the last full batch.
enum class remainder { pad, drop };

template <int N, dataset Source, remainder Remainder = remainder::pad>
class batch_dataset {
 public:
  using source_element = typename Source::element_type;
  using features_type = typename source_element::features_type;
  using label_type = typename source_element::label_type;
  using element_type = batch_of<N, features_type, label_type>;
  static constexpr bool weighted = is_weighted_example_v<source_element>;

  explicit batch_dataset(Source source) : source_(std::move(source)) {}

  std::int64_t cardinality() const {
    const std::int64_t samples = source_.cardinality();
    if (samples < 0) return samples;  // unknown or infinite either way
    return Remainder == remainder::drop ? samples / N : (samples + N - 1) / N;
  }
  // Batches of exactly N samples: the steps of a training epoch, which drops
  // the last partial batch. -1 if the size is unknown.
  std::int64_t full_batches() const {
    const std::int64_t samples = source_.cardinality();
    return samples < 0 ? samples : samples / N;
  }

  class cursor {
   public:
    bool next(element_type& out) {
      constexpr std::size_t rows = static_cast<std::size_t>(N);
      constexpr std::size_t feature_values = features_type::size;  // per sample
      constexpr std::size_t label_values = label_type::size;
      // A batch_of made by the consumer already has this size; resize only a foreign one.
      if (out.features.size() != rows * feature_values) out.features.resize(rows * feature_values);
      if (out.labels.size() != rows * label_values) out.labels.resize(rows * label_values);
      if constexpr (weighted) out.sample_weights.resize(rows);
      else out.sample_weights.clear();

      std::size_t filled = 0;
      while (filled < rows && !source_exhausted_) {
        if (!source_.next(example_)) {
          source_exhausted_ = true;
          break;
        }
        detail::put_row(example_.features, out.features.data() + filled * feature_values);
        detail::put_row(example_.label, out.labels.data() + filled * label_values);
        if constexpr (weighted) out.sample_weights[filled] = example_.weight;
        ++filled;
      }
      out.valid = static_cast<int>(filled);
      if (filled == 0) return false;
      if (Remainder == remainder::drop && filled < rows) {
        out.valid = 0;
        return false;
      }
      // Padding rows (filled..N-1) of a last partial batch.
      std::fill(out.features.begin() + static_cast<std::ptrdiff_t>(filled * feature_values), out.features.end(),
                typename element_type::feature_value{});
      std::fill(out.labels.begin() + static_cast<std::ptrdiff_t>(filled * label_values), out.labels.end(),
                typename element_type::label_value{});
      if constexpr (weighted)
        std::fill(out.sample_weights.begin() + static_cast<std::ptrdiff_t>(filled), out.sample_weights.end(), 0.f);
      return true;
    }

   private:
    friend class batch_dataset;
    explicit cursor(cursor_t<Source> source) : source_(std::move(source)) {}

    cursor_t<Source> source_;
    source_element example_{};  // one sample, read in place then copied into its row
    bool source_exhausted_ = false;
  };

  cursor open(std::uint64_t epoch = 0) const { return cursor(source_.open(epoch)); }

 private:
  Source source_;
};

template <int N, remainder Remainder>
struct batch_adaptor {
  // The same sentence as batch_of's, said where batch<N> is written.
  static_assert(N > 0, "batch<N>: the batch size N must be positive");
  static constexpr bool is_pipeline_adaptor = true;

  template <dataset Source>
  auto operator()(Source source) const {
    if constexpr (N <= 0) {
      return source;  // already refused above
    } else if constexpr (!is_example_v<typename Source::element_type>) {
      static_assert(dependent_false<Source>,
                    "batch<N>: this stage's elements are not examples (example<features, label> or weighted_example); "
                    "batch a dataset of examples, e.g. map to one first");
      return source;
    } else {
      return batch_dataset<N, Source, Remainder>(std::move(source));
    }
  }
};

// source | batch<128>, source | batch<128, remainder::drop>
template <int N, remainder Remainder = remainder::pad>
inline constexpr batch_adaptor<N, Remainder> batch{};

}  // namespace typeflow::data

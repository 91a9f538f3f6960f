// rebatch<M>: a batched dataset's samples batched again at M, as
// `unbatch | batch<M>` would, but keeping each row's sample weight; and
// rows_of: only the samples [begin, end) of each pass (validation_split's two
// parts, train/validation_split.hpp).
//
//   rebatch<M>(source)                element_type = batch_of<M, Features, Label>;
//                                     the valid rows of every batch in order, the
//                                     last batch padded as batch<M> pads it
//   rebatch<M>(source, begin, end)    samples begin .. end - 1 of each pass;
//                                     cardinality ceil((end - begin) / M)
//
// A source batch with sample_weights gives its rows' weights to the batches
// they land in (and a batch mixing weighted and unweighted rows gives the
// latter 1); padding rows weigh 0.
//
//   any_batches<Batch>(ds)            ds as is when its batches are Batch, else
//                                     rebatch<Batch::size>(ds): the same samples in
//                                     the same order, batched again (fit's validation
//                                     data may be batched differently from its
//                                     training data); first(n): the first n batches
//                                     as given, batched again
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>

#include "typeflow/data/any_dataset.hpp"
#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"
#include "typeflow/data/take.hpp"

namespace typeflow::data {

inline constexpr std::int64_t all_rows = -1;

template <int M, batched_dataset Source>
class rebatch_dataset {
 public:
  using source_batch = typename Source::element_type;
  using features_type = typename source_batch::features_type;
  using label_type = typename source_batch::label_type;
  using element_type = batch_of<M, features_type, label_type>;

  rebatch_dataset(Source source, std::int64_t begin, std::int64_t end)
      : source_(std::move(source)), begin_(begin), end_(end) {}

  std::int64_t cardinality() const {
    if (end_ != all_rows) return (end_ - begin_ + M - 1) / M;
    const std::int64_t batches = source_.cardinality();
    return batches == infinite_cardinality || batches == 0 ? batches : unknown_cardinality;
  }

  class cursor {
   public:
    bool next(element_type& out) {
      constexpr std::size_t feature_values = features_type::size, label_values = label_type::size;
      if (out.features.size() != M * feature_values) out.features.resize(M * feature_values);
      if (out.labels.size() != M * label_values) out.labels.resize(M * label_values);
      out.sample_weights.clear();
      int filled = 0;
      while (filled < M && (end_ == all_rows || position_ < end_)) {
        if (row_ >= batch_.valid) {
          if (!source_.next(batch_)) break;
          row_ = 0;
          continue;
        }
        const auto r = static_cast<std::size_t>(row_++);
        if (position_++ < begin_) continue;
        const auto f = static_cast<std::size_t>(filled);
        std::copy_n(batch_.features.data() + r * feature_values, feature_values, out.features.data() + f * feature_values);
        std::copy_n(batch_.labels.data() + r * label_values, label_values, out.labels.data() + f * label_values);
        if (!batch_.sample_weights.empty() && out.sample_weights.empty()) out.sample_weights.assign(M, 1.f);
        if (!out.sample_weights.empty())
          out.sample_weights[f] = batch_.sample_weights.empty() ? 1.f : batch_.sample_weights[r];
        ++filled;
      }
      out.valid = filled;
      if (filled == 0) return false;
      std::fill(out.features.begin() + static_cast<std::ptrdiff_t>(filled * feature_values), out.features.end(),
                typename element_type::feature_value{});
      std::fill(out.labels.begin() + static_cast<std::ptrdiff_t>(filled * label_values), out.labels.end(),
                typename element_type::label_value{});
      if (!out.sample_weights.empty())
        std::fill(out.sample_weights.begin() + filled, out.sample_weights.end(), 0.f);
      return true;
    }

   private:
    friend class rebatch_dataset;
    cursor(cursor_t<Source> source, std::int64_t begin, std::int64_t end)
        : source_(std::move(source)), begin_(begin), end_(end) {}
    cursor_t<Source> source_;
    source_batch batch_{};  // the source batch being taken apart
    int row_ = 0;
    std::int64_t position_ = 0;  // samples of the pass seen so far
    std::int64_t begin_, end_;
  };

  cursor open(std::uint64_t epoch = 0) const { return cursor(source_.open(epoch), begin_, end_); }

 private:
  Source source_;
  std::int64_t begin_, end_;
};

template <int M, batched_dataset Source>
rebatch_dataset<M, Source> rebatch(Source source, std::int64_t begin = 0, std::int64_t end = all_rows) {
  return rebatch_dataset<M, Source>(std::move(source), begin, end);
}

// Any dataset of Batch's examples, batched at Batch's size.
template <class Batch>
class any_batches : public any_dataset<Batch> {
 public:
  any_batches() = default;
  template <batched_dataset D>
    requires std::same_as<typename D::element_type::features_type, typename Batch::features_type> &&
             std::same_as<typename D::element_type::label_type, typename Batch::label_type>
  any_batches(D d)
      : any_dataset<Batch>(rebatched(d)),
        first_([d](std::int64_t n) { return any_dataset<Batch>(rebatched(d | take(n))); }) {}

  // The first n batches as given (before batching again), batched at Batch's size.
  any_dataset<Batch> first(std::int64_t n) const { return first_ ? first_(n) : any_dataset<Batch>(); }

 private:
  std::function<any_dataset<Batch>(std::int64_t)> first_;

  template <class D>
  static auto rebatched(D d) {
    if constexpr (std::is_same_v<typename D::element_type, Batch>)
      return d;
    else
      return rebatch<Batch::size>(std::move(d));
  }
};

}  // namespace typeflow::data

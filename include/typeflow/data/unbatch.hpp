// unbatch: a batched dataset's samples one by one, like tf.data's
// Dataset.unbatch.
//
//   source | unbatch        element_type = example<Features, Label> of the batches;
//                           each batch's valid rows in order (padding left out);
//                           batches with sample weights are refused;
//                           cardinality unknown (infinite for an infinite source)
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>

#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"
#include "typeflow/data/record.hpp"

namespace typeflow::data {

template <batched_dataset Source>
class unbatch_dataset {
 public:
  using batch_type = typename Source::element_type;
  using element_type = example<typename batch_type::features_type, typename batch_type::label_type>;

  explicit unbatch_dataset(Source source) : source_(std::move(source)) {}

  std::int64_t cardinality() const {
    const std::int64_t batches = source_.cardinality();
    return batches == infinite_cardinality || batches == 0 ? batches : unknown_cardinality;
  }

  class cursor {
   public:
    bool next(element_type& out) {
      while (row_ >= batch_.valid) {
        if (!source_.next(batch_)) return false;
        if (!batch_.sample_weights.empty())
          throw std::invalid_argument(
              "unbatch: these batches carry sample weights, which its examples cannot hold; batch weighted data "
              "at the size it is used at (fit's validation_data: the training batch size)");
        row_ = 0;
      }
      const std::size_t r = static_cast<std::size_t>(row_++);
      detail::take_row(batch_.features.data() + r * batch_type::features_type::size, out.features);
      detail::take_row(batch_.labels.data() + r * batch_type::label_type::size, out.label);
      return true;
    }

   private:
    friend class unbatch_dataset;
    explicit cursor(cursor_t<Source> source) : source_(std::move(source)) {}
    cursor_t<Source> source_;
    batch_type batch_{};  // the batch being handed out, row by row
    int row_ = 0;
  };

  cursor open(std::uint64_t epoch = 0) const { return cursor(source_.open(epoch)); }

 private:
  Source source_;
};

struct unbatch_adaptor {
  static constexpr bool is_pipeline_adaptor = true;
  template <dataset Source>
  auto operator()(Source source) const {
    if constexpr (!batched_dataset<Source>) {
      static_assert(dependent_false<Source>, "unbatch: this stage's elements are not batches (batch_of<N, ...>)");
      return source;
    } else {
      return unbatch_dataset<Source>(std::move(source));
    }
  }
};

// source | unbatch
inline constexpr unbatch_adaptor unbatch{};

}  // namespace typeflow::data

// range(stop), range(start, stop, step): the integers start, start + step, ...
// up to but not including stop, like tf.data's Dataset.range.
//
//   range(5)            0 1 2 3 4
//   range(2, 10, 3)     2 5 8
//   range(5, 0, -2)     5 3 1
//   element_type = std::int64_t; cardinality: the count of those integers
//
// Map them to whatever the pipeline needs, e.g. indices into your own arrays.
// step 0 throws std::invalid_argument.
#pragma once

#include <cstdint>
#include <stdexcept>

#include "typeflow/data/example.hpp"

namespace typeflow::data {

class range_dataset {
 public:
  using element_type = std::int64_t;

  range_dataset(std::int64_t start, std::int64_t stop, std::int64_t step) : start_(start), stop_(stop), step_(step) {
    if (step == 0) throw std::invalid_argument("range(start, stop, step): step must not be 0");
  }

  std::int64_t cardinality() const noexcept {
    if (step_ > 0) return stop_ > start_ ? (stop_ - start_ - 1) / step_ + 1 : 0;
    return start_ > stop_ ? (start_ - stop_ - 1) / -step_ + 1 : 0;
  }

  class cursor {
   public:
    bool next(element_type& out) noexcept {
      if (left_ <= 0) return false;
      out = value_;
      value_ += step_;
      --left_;
      return true;
    }

   private:
    friend class range_dataset;
    cursor(std::int64_t start, std::int64_t step, std::int64_t count) : value_(start), step_(step), left_(count) {}
    std::int64_t value_, step_, left_;
  };

  cursor open(std::uint64_t /*epoch*/ = 0) const { return cursor(start_, step_, cardinality()); }

 private:
  std::int64_t start_, stop_, step_;
};

inline range_dataset range(std::int64_t stop) { return {0, stop, 1}; }
inline range_dataset range(std::int64_t start, std::int64_t stop, std::int64_t step = 1) {
  return {start, stop, step};
}

}  // namespace typeflow::data

// take(n): the first n elements of the source (all of them if it has fewer),
// like tf.data's Dataset.take.
//
//   source | take(n)    element_type: the source's
//                       cardinality: min(n, the source's); n of an infinite source;
//                       unknown if the source's is unknown
//
// The pass ends after n elements without reading further, so take(n) of
// repeat() is a finite dataset. n < 0 throws std::invalid_argument.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"

namespace typeflow::data {

template <dataset Source>
class take_dataset {
 public:
  using element_type = typename Source::element_type;

  take_dataset(Source source, std::int64_t count) : source_(std::move(source)), count_(count) {}

  std::int64_t cardinality() const {
    const std::int64_t n = source_.cardinality();
    if (n == infinite_cardinality) return count_;
    if (n == unknown_cardinality) return count_ == 0 ? 0 : unknown_cardinality;
    return std::min(n, count_);
  }

  class cursor {
   public:
    bool next(element_type& out) {
      if (left_ <= 0) return false;
      if (!source_.next(out)) {
        left_ = 0;
        return false;
      }
      --left_;
      return true;
    }

   private:
    friend class take_dataset;
    cursor(cursor_t<Source> source, std::int64_t count) : source_(std::move(source)), left_(count) {}
    cursor_t<Source> source_;
    std::int64_t left_;
  };

  cursor open(std::uint64_t epoch = 0) const { return cursor(source_.open(epoch), count_); }

 private:
  Source source_;
  std::int64_t count_;
};

struct take_adaptor {
  static constexpr bool is_pipeline_adaptor = true;
  std::int64_t count;

  template <dataset Source>
  take_dataset<Source> operator()(Source source) const {
    return take_dataset<Source>(std::move(source), count);
  }
};

inline take_adaptor take(std::int64_t count) {
  if (count < 0) throw std::invalid_argument("take(n): n must be at least 0; got " + std::to_string(count));
  return {count};
}

}  // namespace typeflow::data

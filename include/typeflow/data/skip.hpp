// skip(n): every element after the first n, like tf.data's Dataset.skip.
//
//   source | skip(n)    element_type: the source's
//                       cardinality: max(0, the source's - n); infinite and unknown stay so
//
// The first next() reads and drops n elements (into the caller's element,
// which is then overwritten). n < 0 throws std::invalid_argument.
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
class skip_dataset {
 public:
  using element_type = typename Source::element_type;

  skip_dataset(Source source, std::int64_t count) : source_(std::move(source)), count_(count) {}

  std::int64_t cardinality() const {
    const std::int64_t n = source_.cardinality();
    return n < 0 ? n : std::max<std::int64_t>(0, n - count_);
  }

  class cursor {
   public:
    bool next(element_type& out) {
      while (to_skip_ > 0 && !ended_) {
        if (source_.next(out))
          --to_skip_;
        else
          ended_ = true;
      }
      if (ended_) return false;
      if (!source_.next(out)) {
        ended_ = true;
        return false;
      }
      return true;
    }

   private:
    friend class skip_dataset;
    cursor(cursor_t<Source> source, std::int64_t count) : source_(std::move(source)), to_skip_(count) {}
    cursor_t<Source> source_;
    std::int64_t to_skip_;
    bool ended_ = false;
  };

  cursor open(std::uint64_t epoch = 0) const { return cursor(source_.open(epoch), count_); }

 private:
  Source source_;
  std::int64_t count_;
};

struct skip_adaptor {
  static constexpr bool is_pipeline_adaptor = true;
  std::int64_t count;

  template <dataset Source>
  skip_dataset<Source> operator()(Source source) const {
    return skip_dataset<Source>(std::move(source), count);
  }
};

inline skip_adaptor skip(std::int64_t count) {
  if (count < 0) throw std::invalid_argument("skip(n): n must be at least 0; got " + std::to_string(count));
  return {count};
}

}  // namespace typeflow::data

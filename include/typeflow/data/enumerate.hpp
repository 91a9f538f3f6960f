// enumerate(start): pairs each element with its position, like tf.data's
// Dataset.enumerate.
//
//   source | enumerate()     element_type = enumerated<E>{index, element}, index 0, 1, 2, ...
//   source | enumerate(s)    index s, s + 1, ...
//
// The index counts within one pass: every epoch starts again at start.
#pragma once

#include <cstdint>
#include <utility>

#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"

namespace typeflow::data {

// An element and its position; an aggregate, so `auto [i, e] = x;` works.
template <class Element>
struct enumerated {
  std::int64_t index = 0;
  Element element{};
};

template <dataset Source>
class enumerate_dataset {
 public:
  using element_type = enumerated<typename Source::element_type>;

  enumerate_dataset(Source source, std::int64_t start) : source_(std::move(source)), start_(start) {}

  std::int64_t cardinality() const { return source_.cardinality(); }

  class cursor {
   public:
    bool next(element_type& out) {
      if (!source_.next(out.element)) return false;
      out.index = index_++;
      return true;
    }

   private:
    friend class enumerate_dataset;
    cursor(cursor_t<Source> source, std::int64_t start) : source_(std::move(source)), index_(start) {}
    cursor_t<Source> source_;
    std::int64_t index_;
  };

  cursor open(std::uint64_t epoch = 0) const { return cursor(source_.open(epoch), start_); }

 private:
  Source source_;
  std::int64_t start_;
};

struct enumerate_adaptor {
  static constexpr bool is_pipeline_adaptor = true;
  std::int64_t start = 0;

  template <dataset Source>
  enumerate_dataset<Source> operator()(Source source) const {
    return enumerate_dataset<Source>(std::move(source), start);
  }
};

inline enumerate_adaptor enumerate(std::int64_t start = 0) { return {start}; }

}  // namespace typeflow::data

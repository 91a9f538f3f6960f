// filter(predicate): keeps the elements for which predicate(element) is true,
// like tf.data's Dataset.filter.
//
//   source | filter(p)    element_type: the source's; cardinality: unknown (-1),
//                         since how many pass is known only by reading them all
//
// The predicate is called with the element as a const lvalue and must return
// something convertible to bool; anything else is a compile error with one
// sentence. Rejected elements are read into the caller's element and then
// overwritten, so filtering allocates nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>

#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"

namespace typeflow::data {

template <dataset Source, class Predicate>
class filter_dataset {
 public:
  using element_type = typename Source::element_type;

  filter_dataset(Source source, Predicate predicate) : source_(std::move(source)), predicate_(std::move(predicate)) {}

  std::int64_t cardinality() const {
    const std::int64_t n = source_.cardinality();
    return n == 0 || n == infinite_cardinality ? n : unknown_cardinality;
  }

  class cursor {
   public:
    bool next(element_type& out) {
      while (source_.next(out))
        if (std::invoke(std::as_const(predicate_), std::as_const(out))) return true;
      return false;
    }

   private:
    friend class filter_dataset;
    cursor(cursor_t<Source> source, Predicate predicate)
        : source_(std::move(source)), predicate_(std::move(predicate)) {}
    cursor_t<Source> source_;
    Predicate predicate_;
  };

  cursor open(std::uint64_t epoch = 0) const { return cursor(source_.open(epoch), predicate_); }

 private:
  Source source_;
  Predicate predicate_;
};

template <class Predicate>
struct filter_adaptor {
  static constexpr bool is_pipeline_adaptor = true;
  Predicate predicate;

  template <dataset Source>
  auto operator()(Source source) const {
    using element = typename Source::element_type;
    constexpr bool callable = std::is_invocable_v<const Predicate&, const element&>;
    if constexpr (!callable) {
      static_assert(callable,
                    "filter(p): the predicate cannot be called with this stage's element type; "
                    "p must accept the previous stage's element_type by value or by const&");
      return source;
    } else if constexpr (!std::is_convertible_v<std::invoke_result_t<const Predicate&, const element&>, bool>) {
      static_assert(dependent_false<Source>, "filter(p): the predicate must return bool (true keeps the element)");
      return source;
    } else {
      return filter_dataset<Source, Predicate>(std::move(source), predicate);
    }
  }
};

template <class Predicate>
filter_adaptor<std::decay_t<Predicate>> filter(Predicate&& predicate) {
  return {std::forward<Predicate>(predicate)};
}

}  // namespace typeflow::data

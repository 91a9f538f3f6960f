// zip(a, b, ...): the datasets side by side, like tf.data's Dataset.zip.
//
//   zip(a, b)    element_type = std::tuple<A, B> (A, B: a's and b's element types)
//                cardinality: the smallest of theirs; unknown if any is unknown
//                and none is smaller; infinite only if all are
//
// Element i is (a's element i, b's element i, ...); the pass ends with the
// shortest dataset. Every dataset is opened at the same epoch. To get an
// example from a features dataset and a labels dataset, map the tuple:
//   zip(features, labels) | map([](const auto& t) {
//     return example<F, L>{std::get<0>(t), std::get<1>(t)}; })
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>

#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"

namespace typeflow::data {

template <dataset... Sources>
class zip_dataset {
  static_assert(sizeof...(Sources) >= 1, "zip(datasets...): give at least one dataset");

 public:
  using element_type = std::tuple<typename Sources::element_type...>;

  explicit zip_dataset(Sources... sources) : sources_(std::move(sources)...) {}

  std::int64_t cardinality() const {
    std::int64_t smallest = infinite_cardinality;
    bool unknown = false;
    std::apply(
        [&](const auto&... source) {
          const auto take = [&](std::int64_t n) {
            if (n == unknown_cardinality)
              unknown = true;
            else if (n >= 0 && (smallest < 0 || n < smallest))
              smallest = n;
          };
          (take(source.cardinality()), ...);
        },
        sources_);
    if (smallest >= 0) return unknown && smallest > 0 ? unknown_cardinality : smallest;
    return unknown ? unknown_cardinality : infinite_cardinality;
  }

  class cursor {
   public:
    bool next(element_type& out) {
      if (ended_) return false;
      const bool all = next_each(out, std::index_sequence_for<Sources...>{});
      ended_ = !all;
      return all;
    }

   private:
    friend class zip_dataset;
    explicit cursor(cursor_t<Sources>... cursors) : cursors_(std::move(cursors)...) {}

    template <std::size_t... I>
    bool next_each(element_type& out, std::index_sequence<I...>) {
      return (std::get<I>(cursors_).next(std::get<I>(out)) && ...);  // in order; stops at the first end
    }

    std::tuple<cursor_t<Sources>...> cursors_;
    bool ended_ = false;
  };

  cursor open(std::uint64_t epoch = 0) const {
    return std::apply([&](const auto&... source) { return cursor(source.open(epoch)...); }, sources_);
  }

 private:
  std::tuple<Sources...> sources_;
};

template <class... Datasets>
auto zip(Datasets... datasets) {
  if constexpr (!(dataset<Datasets> && ...)) {
    static_assert(dependent_false<std::tuple<Datasets...>>,
                  "zip(datasets...): every argument must be a dataset (an element_type, cardinality() "
                  "and open(epoch) returning a cursor with bool next(element_type&))");
    return 0;
  } else {
    return zip_dataset<Datasets...>(std::move(datasets)...);
  }
}

}  // namespace typeflow::data

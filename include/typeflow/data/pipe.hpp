// dataset | adaptor: how pipeline stages compose.
//
//   auto train = mnist(dir, split::train) | map(scale(1.f / 255))
//              | shuffle(60'000, 42) | batch<128>;
//
// An adaptor (map, shuffle, batch<N>) is a small value that, applied to a
// dataset, returns a new dataset wrapping a copy of it. Datasets are cheap to
// copy: sources share their immutable storage through a shared_ptr, so
// `source | adaptor` copies a pointer, never the samples.
#pragma once

#include <concepts>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "typeflow/data/example.hpp"

namespace typeflow::data {

// The cursor type that open(epoch) returns.
template <class D>
using cursor_t = decltype(std::declval<const D&>().open(std::uint64_t{0}));

// map(f, autotune), prefetch(autotune): let the pipeline choose (as tf.data.AUTOTUNE);
// map takes one worker per hardware thread, prefetch keeps two elements ahead.
inline constexpr int autotune = -1;

// For a static_assert that must fire only when its branch is instantiated.
template <class>
inline constexpr bool dependent_false = false;

// An adaptor says so with `static constexpr bool is_pipeline_adaptor = true;`
// and has `operator()(Dataset) const` returning the wrapped dataset.
template <class A>
concept pipeline_adaptor = requires {
  requires std::remove_cvref_t<A>::is_pipeline_adaptor;
};

// Only the adaptor is constrained, so that piping a non-dataset reads as one
// sentence rather than "no match for operator|" followed by every candidate.
template <class D, pipeline_adaptor A>
auto operator|(D source, const A& adaptor) {
  if constexpr (dataset<D>) {
    return adaptor(std::move(source));
  } else {
    static_assert(dependent_false<D>,
                  "dataset | adaptor: the left-hand side is not a dataset (it needs an element_type, "
                  "cardinality() and open(epoch) returning a cursor with bool next(element_type&))");
    return source;
  }
}

}  // namespace typeflow::data

// map(f): a stage whose elements are f(element), like tf.data's Dataset.map.
//
//   source | map(f)    element_type = std::decay_t<decltype(f(source element))>
//
// The new element type is deduced at compile time. f is called with the
// source element as a const lvalue, so it may take it by value or by const&.
// If it cannot be called with the stage's element type, the compiler says so
// in one static_assert before anything else.
//
// scale(factor): for map. Turns example<tensor_value<T, S>, Label> (any
// arithmetic T) into example<tensor_value<float, S>, Label> with every feature
// multiplied by factor, e.g. map(scale(1.f / 255)) for pixels in [0, 1].
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>

#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"

namespace typeflow::data {

template <dataset Source, class F>
class map_dataset {
 public:
  using source_element = typename Source::element_type;
  using element_type = std::decay_t<std::invoke_result_t<const F&, const source_element&>>;

  map_dataset(Source source, F function) : source_(std::move(source)), function_(std::move(function)) {}

  std::int64_t cardinality() const { return source_.cardinality(); }

  class cursor {
   public:
    bool next(element_type& out) {
      if (!source_.next(input_)) return false;
      out = std::invoke(std::as_const(function_), std::as_const(input_));  // as checked: const f, const element
      return true;
    }

   private:
    friend class map_dataset;
    cursor(cursor_t<Source> source, F function)
        : source_(std::move(source)), function_(std::move(function)) {}

    cursor_t<Source> source_;
    F function_;
    source_element input_{};  // the source's element, filled in place
  };

  cursor open(std::uint64_t epoch = 0) const { return cursor(source_.open(epoch), function_); }

 private:
  Source source_;
  F function_;
};

template <class F>
struct map_adaptor {
  static constexpr bool is_pipeline_adaptor = true;
  F function;

  template <dataset Source>
  auto operator()(Source source) const {
    using element = typename Source::element_type;
    // Traits, not concepts, in the asserts: g++ would follow a failed concept
    // with notes on why, and the sentence should stand alone.
    constexpr bool callable = std::is_invocable_v<const F&, const element&>;
    if constexpr (!callable) {
      static_assert(callable,
                    "map(f): the function cannot be called with this stage's element type; "
                    "f must accept the previous stage's element_type (e.g. an example<features, label>) "
                    "by value or by const&");
      return source;
    } else if constexpr (std::is_void_v<std::invoke_result_t<const F&, const element&>>) {
      static_assert(dependent_false<Source>,
                    "map(f): the function returns void; it must return the new element");
      return source;
    } else {
      return map_dataset<Source, F>(std::move(source), function);
    }
  }
};

template <class F>
map_adaptor<std::decay_t<F>> map(F&& function) {
  return {std::forward<F>(function)};
}

// scale(factor): see the top of this file.
struct scale {
  float factor;

  constexpr explicit scale(float multiply_by) noexcept : factor(multiply_by) {}

  template <class T, class Shape, class Label>
    requires std::is_arithmetic_v<T>
  example<tensor_value<float, Shape>, Label> operator()(const example<tensor_value<T, Shape>, Label>& in) const noexcept {
    example<tensor_value<float, Shape>, Label> out;
    for (std::size_t i = 0; i < Shape::size; ++i) out.features[i] = static_cast<float>(in.features[i]) * factor;
    out.label = in.label;
    return out;
  }
};

}  // namespace typeflow::data

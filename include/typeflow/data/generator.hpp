// generator(f): a dataset made by a user's callable, like tf.data's
// Dataset.from_generator. Two forms:
//
//   generator([i = 0]() mutable -> std::optional<E> {     element_type = E
//     if (i == 3) return std::nullopt;                    (the optional's value type)
//     return make(i++);
//   })
//   generator<E>([i = 0](E& out) mutable -> bool {        fills out in place; false ends the pass
//     ...
//   })
//
//   generator(f, cardinality)   says how many elements a pass yields (default: unknown, -1)
//
// Every pass calls its own copy of f, copied from the dataset's at open(), so
// a lambda's captured state starts afresh each epoch. f runs in whatever
// thread reads the stage (the consumer's, or a worker's under map(f, n) or
// prefetch), one call at a time. A callable that fits neither form is a
// compile error with one sentence.
//
// A callable that hangs (a socket that never answers, a lock never
// released) hangs whatever reads it: fit waits in its step, and under
// prefetch or map(f, n) destroying the cursor waits for the call in
// progress to return. typeflow puts no timeout around user code, since it
// cannot stop a thread safely; a callable that may block should wait with
// a deadline of its own and throw, and the exception reaches fit's caller
// as any pipeline error does (tests/standalone/fault_injection_test.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"

namespace typeflow::data {

namespace detail {
template <class T>
inline constexpr bool is_optional_v = false;
template <class T>
inline constexpr bool is_optional_v<std::optional<T>> = true;
}  // namespace detail

template <class Element, class F>
class generator_dataset {
 public:
  using element_type = Element;

  generator_dataset(F function, std::int64_t cardinality) : function_(std::move(function)), cardinality_(cardinality) {}

  std::int64_t cardinality() const noexcept { return cardinality_; }

  class cursor {
   public:
    bool next(element_type& out) {
      if (ended_) return false;
      if constexpr (std::is_invocable_v<F&, element_type&>) {
        ended_ = !static_cast<bool>(function_(out));
      } else {
        std::optional<element_type> made = function_();
        ended_ = !made.has_value();
        if (made) out = std::move(*made);
      }
      return !ended_;
    }

   private:
    friend class generator_dataset;
    explicit cursor(F function) : function_(std::move(function)) {}
    F function_;
    bool ended_ = false;
  };

  cursor open(std::uint64_t /*epoch*/ = 0) const { return cursor(function_); }

 private:
  F function_;
  std::int64_t cardinality_;
};

// Element void: deduce it from f() -> std::optional<E>.
template <class Element = void, class F>
auto generator(F function, std::int64_t cardinality = unknown_cardinality) {
  using callable = std::decay_t<F>;
  if constexpr (!std::is_copy_constructible_v<callable>) {
    static_assert(dependent_false<F>,
                  "generator(f): f must be copyable: each pass calls a fresh copy of it (share state "
                  "that must outlive a pass through a std::shared_ptr capture)");
    return 0;
  } else if constexpr (std::is_void_v<Element>) {
    if constexpr (!std::is_invocable_v<callable&>) {
      static_assert(dependent_false<F>,
                    "generator(f): f must be callable as f() returning std::optional<element>, or name the "
                    "element type, generator<E>(f), with f(E&) returning bool");
      return 0;
    } else if constexpr (!detail::is_optional_v<std::invoke_result_t<callable&>>) {
      static_assert(dependent_false<F>,
                    "generator(f): f() must return std::optional<element> (std::nullopt ends the pass)");
      return 0;
    } else {
      using element = typename std::invoke_result_t<callable&>::value_type;
      return generator_dataset<element, callable>(std::move(function), cardinality);
    }
  } else {
    constexpr bool fills = std::is_invocable_r_v<bool, callable&, Element&>;
    constexpr bool makes = std::is_invocable_r_v<std::optional<Element>, callable&>;
    if constexpr (!fills && !makes) {
      static_assert(dependent_false<F>,
                    "generator<E>(f): f must be callable as f(E&) returning bool (false ends the pass), "
                    "or as f() returning std::optional<E>");
      return 0;
    } else {
      return generator_dataset<Element, callable>(std::move(function), cardinality);
    }
  }
}

}  // namespace typeflow::data

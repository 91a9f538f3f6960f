// Per-layer options as types: dense<64, kernel_initializer<he_normal>,
// kernel_regularizer<regularizers::l2<1e-4f>>>. Each option kind may appear
// once; a layer reads the ones it knows and keeps its defaults otherwise.
#pragma once

#include <type_traits>

#include "typeflow/core/dtype.hpp"
#include "typeflow/regularizers/regularizers.hpp"

namespace typeflow {

template <class Initializer>
struct kernel_initializer {
  using type = Initializer;
};
template <class Initializer>
struct bias_initializer {
  using type = Initializer;
};
template <class Initializer>
struct gamma_initializer {
  using type = Initializer;
};
template <class Initializer>
struct beta_initializer {
  using type = Initializer;
};
template <class Regularizer>
struct kernel_regularizer {
  using type = Regularizer;
};
template <class Regularizer>
struct bias_regularizer {
  using type = Regularizer;
};

namespace detail {
template <template <class> class Kind, class Option>
inline constexpr bool is_option_of = false;
template <template <class> class Kind, class T>
inline constexpr bool is_option_of<Kind, Kind<T>> = true;

template <template <class> class Kind, class Default, class... Options>
struct find_option {
  using type = Default;
};
// Inherits `type` from the matching option (or the search's rest), so that
// options without a nested type (dtypes) are never asked for one.
template <template <class> class Kind, class Default, class First, class... Rest>
struct find_option<Kind, Default, First, Rest...>
    : std::conditional_t<is_option_of<Kind, First>, First, find_option<Kind, Default, Rest...>> {};

// The options a normalization layer takes (gamma, the scale; beta, the offset).
template <class Option>
inline constexpr bool is_normalization_option =
    is_option_of<gamma_initializer, Option> || is_option_of<beta_initializer, Option>;

template <class Option>
inline constexpr bool is_known_option =
    is_option_of<kernel_initializer, Option> || is_option_of<bias_initializer, Option> ||
    is_option_of<kernel_regularizer, Option> || is_option_of<bias_regularizer, Option>;
// A dtype among a layer's options overrides the policy's compute dtype for
// that layer, as Keras's dtype="float32" on an output layer: dense<10, float32>.
template <class Option>
inline constexpr bool is_dtype_option =
    std::is_same_v<Option, float32> || std::is_same_v<Option, float16> || std::is_same_v<Option, bfloat16>;

template <class Default, class... Options>
struct find_dtype_option {
  using type = Default;
};
template <class Default, class First, class... Rest>
struct find_dtype_option<Default, First, Rest...> {
  using type = std::conditional_t<is_dtype_option<First>, First, typename find_dtype_option<Default, Rest...>::type>;
};
}  // namespace detail

// The dtype option among Options, or Default (the policy's compute dtype).
template <class Default, class... Options>
using dtype_option_t = typename detail::find_dtype_option<Default, Options...>::type;
template <class... Options>
inline constexpr int dtype_option_count = (0 + ... + detail::is_dtype_option<Options>);

// The option of kind Kind among Options, or Default.
template <template <class> class Kind, class Default, class... Options>
using option_t = typename detail::find_option<Kind, Default, Options...>::type;

// How many of Options are of kind Kind (a layer refuses duplicates).
template <template <class> class Kind, class... Options>
inline constexpr int option_count = (0 + ... + detail::is_option_of<Kind, Options>);

}  // namespace typeflow

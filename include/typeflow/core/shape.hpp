// shape<Dims...>: a tensor's per-sample extent as a type.
//
// Every size in typeflow that the compiler can know is a shape: a layer's
// input and output, a parameter, a label. Element counts, ranks and the dims
// themselves are constants, so layers check each other with static_assert.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <type_traits>

namespace typeflow {

template <int... Dims>
struct shape {
  static_assert(((Dims > 0) && ...), "shape<Dims...>: every dimension must be positive");

  static constexpr int rank = sizeof...(Dims);
  static constexpr std::size_t size = (std::size_t{1} * ... * static_cast<std::size_t>(Dims));
  static constexpr std::array<int, sizeof...(Dims)> dims{Dims...};

  // dim<I>: the I-th extent; a negative I counts from the end, as in Python.
  template <int I>
  static constexpr int dim = [] {
    static_assert(I < rank && I >= -rank, "shape::dim<I>: axis out of range");
    return dims[static_cast<std::size_t>(I < 0 ? rank + I : I)];
  }();

  // "(28, 28)", the way Keras prints shapes (without the batch axis).
  static std::string str() {
    std::string out = "(";
    bool first = true;
    for (int d : dims) {
      if (!first) out += ", ";
      out += std::to_string(d);
      first = false;
    }
    if (rank == 1) out += ",";
    return out + ")";
  }

  template <int... Other>
  friend constexpr bool operator==(shape, shape<Other...>) {
    return std::is_same_v<shape, shape<Other...>>;
  }
};

template <class T>
inline constexpr bool is_shape_v = false;
template <int... Dims>
inline constexpr bool is_shape_v<shape<Dims...>> = true;

namespace detail {
template <class Shape, int Last>
struct replace_last;
template <int... Dims, int Last>
struct replace_last<shape<Dims...>, Last> {
  static constexpr std::array<int, sizeof...(Dims)> in{Dims...};
  template <std::size_t... I>
  static auto make(std::index_sequence<I...>)
      -> shape<(I + 1 == sizeof...(Dims) ? Last : in[I])...>;
  using type = decltype(make(std::make_index_sequence<sizeof...(Dims)>{}));
};

template <class Shape>
struct drop_last;
template <int... Dims>
struct drop_last<shape<Dims...>> {
  static constexpr std::array<int, sizeof...(Dims)> in{Dims...};
  template <std::size_t... I>
  static auto make(std::index_sequence<I...>) -> shape<in[I]...>;
  using type = decltype(make(std::make_index_sequence<sizeof...(Dims) - 1>{}));
};

template <class A, class B>
struct concat_shapes;
template <int... A, int... B>
struct concat_shapes<shape<A...>, shape<B...>> {
  using type = shape<A..., B...>;
};
}  // namespace detail

// (..., n) -> (..., Last): what a dense layer does to its input's last axis.
template <class Shape, int Last>
using replace_last_t = typename detail::replace_last<Shape, Last>::type;

// (..., n) -> (...): the shape of class ids for logits of Shape.
template <class Shape>
using drop_last_t = typename detail::drop_last<Shape>::type;

template <class A, class B>
using concat_shapes_t = typename detail::concat_shapes<A, B>::type;

// The per-sample shape, flattened: what flatten produces.
template <class Shape>
using flat_shape_t = shape<static_cast<int>(Shape::size)>;

}  // namespace typeflow

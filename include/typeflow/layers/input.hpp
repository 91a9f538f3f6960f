// input<Dims...>: the per-sample shape a network takes, without the batch
// axis. typed_input<DType, Dims...> names the element type (token ids will be
// typed_input<int32, T>); input<Dims...> is float32.
#pragma once

#include <string>

#include "typeflow/core/dtype.hpp"
#include "typeflow/core/shape.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {

template <class DType, int... Dims>
struct typed_input {
  static_assert(sizeof...(Dims) > 0, "input<Dims...>: give the per-sample shape, e.g. input<784>");
  static_assert(((Dims > 0) && ...), "input<Dims...>: every dimension must be positive");
  using dtype = DType;
  using shape_type = shape<Dims...>;
  static std::string type_name() { return "input" + shape_type::str(); }
};

template <int... Dims>
using input = typed_input<float32, Dims...>;

template <class T>
inline constexpr bool is_input_v = false;
template <class D, int... Dims>
inline constexpr bool is_input_v<typed_input<D, Dims...>> = true;

}  // namespace typeflow

// flatten and reshape<Dims...>: new per-sample shapes over the same memory.
//
//   flatten:          (B, d1, ..., dn) -> (B, d1 * ... * dn)
//   reshape<Dims...>: (B, ...)         -> (B, Dims...), same element count
//
// Both are free: their output and gradient share their input's buffers, and
// their output keeps the input's dtype.
#pragma once

#include <string>

#include "typeflow/core/shape.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {

struct flatten {
  static std::string type_name() { return "flatten"; }

  template <class In, class Context>
  struct bind : layer_defaults {
    using input_shape = In;
    using output_shape = flat_shape_t<In>;
    static constexpr bool output_aliases_input = true;
    static constexpr bool gradient_in_place = true;
    using compute_dtype = typename Context::precision::input;
    using output_dtype = typename Context::precision::input;
    static constexpr bool computes_nothing = true;  // on every device
  };
};

template <int... Dims>
struct reshape {
  static_assert(sizeof...(Dims) > 0, "reshape<Dims...>: give the target per-sample shape");
  static_assert(((Dims > 0) && ...), "reshape<Dims...>: every dimension must be positive");

  static std::string type_name() {
    std::string name = "reshape<";
    bool first = true;
    for (int d : {Dims...}) {
      name += (first ? "" : ", ") + std::to_string(d);
      first = false;
    }
    return name + ">";
  }

  template <class In, class Context>
  struct bind : layer_defaults {
    static_assert(layer_check<layer_at<Context::position, reshape>, given<In, shape<Dims...>>,
                              In::size == shape<Dims...>::size>::passed,
                  "reshape<Dims...>: the target shape must hold exactly as many elements as the "
                  "layer's input (see the layer position and both shapes in the note below)");
    using input_shape = In;
    using output_shape = shape<Dims...>;
    static constexpr bool output_aliases_input = true;
    static constexpr bool gradient_in_place = true;
    using compute_dtype = typename Context::precision::input;
    using output_dtype = typename Context::precision::input;
    static constexpr bool computes_nothing = true;  // on every device
  };
};

template <>
inline constexpr dtype_flow dtype_flow_of<flatten> = dtype_flow::passes_through;
template <int... Dims>
inline constexpr dtype_flow dtype_flow_of<reshape<Dims...>> = dtype_flow::passes_through;

}  // namespace typeflow

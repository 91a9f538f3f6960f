// dropout<Rate>: zeroes each element with probability Rate while training and
// scales the survivors by 1 / (1 - Rate) (inverted dropout), so evaluation
// and prediction pass the input through unchanged.
//
//   input (B, ...) -> output (B, ...), no parameters; keeps a byte mask per
//   element from forward to backward.
//
// It keeps its input's dtype (16-bit storage under a 16-bit policy).
//
// The mask of element i at step s is a pure function of (model seed, the
// layer's salt (layer_io::salt), s, i), so a seeded run reproduces bit for bit, and both devices
// draw the same masks (backend/cpu/dropout.hpp, backend/cuda/layers.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "typeflow/core/random.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {

template <float Rate>
struct dropout {
  static std::string type_name() {
    std::string rate = std::to_string(Rate);
    while (rate.size() > 3 && rate.back() == '0') rate.pop_back();
    return "dropout<" + rate + ">";
  }

  template <class In, class Context>
  struct bind : layer_defaults {
    static_assert(layer_check<layer_at<Context::position, dropout>, given<In>,
                              (Rate >= 0.f && Rate < 1.f)>::passed,
                  "dropout<Rate>: Rate is the fraction of inputs dropped and must lie in [0, 1)");
    using input_shape = In;
    using output_shape = In;
    static constexpr bool gradient_in_place = true;
    static constexpr std::size_t workspace_bytes_per_sample = In::size;  // the keep mask
    static constexpr std::size_t flops_per_sample = In::size;
    using compute_dtype = typename Context::precision::input;
    using output_dtype = typename Context::precision::input;
  };
};

template <float Rate>
inline constexpr dtype_flow dtype_flow_of<dropout<Rate>> = dtype_flow::passes_through;

}  // namespace typeflow

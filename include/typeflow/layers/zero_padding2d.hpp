// zero_padding2d<Pad = 1>: Keras ZeroPadding2D(padding=(h, w)), channels last.
//
//   input (B, H, W, C) -> output (B, H + 2h, W + 2w, C), no parameters
//
// Pad is a window (window.hpp): zero_padding2d<1> adds one row of zeros above
// and below and one column left and right; zero_padding2d<{2, 1}> two rows
// and one column. Backward crops the gradient back to (H, W, C). The
// executor: backend/cpu/zero_padding2d.hpp.
#pragma once

#include <cstddef>
#include <string>

#include "typeflow/core/shape.hpp"
#include "typeflow/layers/pooling.hpp"
#include "typeflow/layers/window.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {

template <window Pad = 1>
struct zero_padding2d {
  static std::string type_name() { return "zero_padding2d<" + detail::window_string(Pad) + ">"; }

  template <class In, class Context>
  struct bind : layer_defaults {
    static_assert(layer_check<layer_at<Context::position, zero_padding2d>, given<In>, In::rank == 3>::passed,
                  "zero_padding2d: the input must be (height, width, channels) per sample, channels last");
    static_assert(layer_check<layer_at<Context::position, zero_padding2d>, given<In>,
                              (Pad.height >= 0 && Pad.width >= 0)>::passed,
                  "zero_padding2d<Pad>: the padding must not be negative (it adds Pad rows above and below and "
                  "Pad columns left and right)");
    static constexpr int pad_h = Pad.height > 0 ? Pad.height : 0;
    static constexpr int pad_w = Pad.width > 0 ? Pad.width : 0;
    static constexpr int in_h = detail::rank3_dim<In>(0);
    static constexpr int in_w = detail::rank3_dim<In>(1);
    static constexpr int channels = detail::rank3_dim<In>(2);
    static constexpr int out_h = in_h + 2 * pad_h;
    static constexpr int out_w = in_w + 2 * pad_w;
    using input_shape = In;
    using output_shape = shape<out_h, out_w, channels>;
  };
};

}  // namespace typeflow

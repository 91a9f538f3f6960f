// zero_padding2d<Pad = 1>: Keras ZeroPadding2D(padding=(h, w)), channels last.
//
//   input (B, H, W, C) -> output (B, H + 2h, W + 2w, C), no parameters
//
// Pad is a window (window.hpp): zero_padding2d<1> adds one row of zeros above
// and below and one column left and right; zero_padding2d<{2, 1}> two rows
// and one column. Backward crops the gradient back to (H, W, C).
#pragma once

#include <cstddef>
#include <cstring>
#include <string>

#include "typeflow/backend/cpu/parallel.hpp"
#include "typeflow/core/shape.hpp"
#include "typeflow/layers/pooling.hpp"
#include "typeflow/layers/window.hpp"
#include "typeflow/model/layer.hpp"

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

    template <int Batch>
    class executor : public executor_defaults {
      static constexpr std::ptrdiff_t in_row = static_cast<std::ptrdiff_t>(in_w) * channels;
      static constexpr std::ptrdiff_t out_row = static_cast<std::ptrdiff_t>(out_w) * channels;
      static constexpr std::ptrdiff_t side = static_cast<std::ptrdiff_t>(pad_w) * channels;

     public:
      explicit executor(const layer_io& io) : io_(io) {}

      void forward() {  // one output row at a time: zeros, or zeros | the input row | zeros
        const float* in = io_.in;
        float* out = io_.out;
        backend::cpu::parallel_rows(static_cast<std::ptrdiff_t>(Batch) * out_h, out_row, [=](std::ptrdiff_t r) {
          const std::ptrdiff_t n = r / out_h, h = r % out_h - pad_h;
          float* o = out + r * out_row;
          if (h < 0 || h >= in_h) {
            std::memset(o, 0, sizeof(float) * out_row);
            return;
          }
          if constexpr (side > 0) {
            std::memset(o, 0, sizeof(float) * side);
            std::memset(o + side + in_row, 0, sizeof(float) * side);
          }
          std::memcpy(o + side, in + (n * in_h + h) * in_row, sizeof(float) * in_row);
        });
      }

      void backward() {  // the gradient's interior
        if (!io_.d_in) return;
        float* d_in = io_.d_in;
        const float* d_out = io_.d_out;
        backend::cpu::parallel_rows(static_cast<std::ptrdiff_t>(Batch) * in_h, in_row, [=](std::ptrdiff_t r) {
          const std::ptrdiff_t n = r / in_h, h = r % in_h;
          std::memcpy(d_in + r * in_row, d_out + (n * out_h + h + pad_h) * out_row + side, sizeof(float) * in_row);
        });
      }

     private:
      layer_io io_;
    };
  };
};

}  // namespace typeflow

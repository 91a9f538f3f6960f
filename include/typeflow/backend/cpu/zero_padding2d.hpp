// zero_padding2d on the CPU: rows over the cores, each output row zeros or
// zeros | the input row | zeros (memset and memcpy); backward copies the
// gradient's interior.
#pragma once

#include <cstddef>
#include <cstring>

#include "typeflow/core/parallel.hpp"
#include "typeflow/layers/zero_padding2d.hpp"
#include "typeflow/contract/executor.hpp"

namespace typeflow {

template <window Pad, class Layer, int Batch>
class executor<zero_padding2d<Pad>, Layer, Batch, cpu> : public executor_defaults {
  static constexpr int pad_h = Layer::pad_h;
  static constexpr int in_h = Layer::in_h;
  static constexpr int out_h = Layer::out_h;
  static constexpr std::ptrdiff_t in_row = static_cast<std::ptrdiff_t>(Layer::in_w) * Layer::channels;
  static constexpr std::ptrdiff_t out_row = static_cast<std::ptrdiff_t>(Layer::out_w) * Layer::channels;
  static constexpr std::ptrdiff_t side = static_cast<std::ptrdiff_t>(Layer::pad_w) * Layer::channels;

 public:
  explicit executor(const layer_io<cpu>& io) : io_(io) {}

  void forward() {  // one output row at a time: zeros, or zeros | the input row | zeros
    const float* in = io_.in;
    float* out = io_.out;
    typeflow::parallel_rows(static_cast<std::ptrdiff_t>(Batch) * out_h, out_row, [=](std::ptrdiff_t r) {
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
    typeflow::parallel_rows(static_cast<std::ptrdiff_t>(Batch) * in_h, in_row, [=](std::ptrdiff_t r) {
      const std::ptrdiff_t n = r / in_h, h = r % in_h;
      std::memcpy(d_in + r * in_row, d_out + (n * out_h + h + pad_h) * out_row + side, sizeof(float) * in_row);
    });
  }

 private:
  layer_io<cpu> io_;
};

}  // namespace typeflow

// softmax on the CPU (the layer: layers/softmax.hpp): the rows split over
// the cores, each through softmax_row; backward in place on the gradient.
#pragma once

#include <cstddef>

#include "typeflow/core/parallel.hpp"
#include "typeflow/core/row_math.hpp"
#include "typeflow/layers/softmax.hpp"
#include "typeflow/contract/executor.hpp"

namespace typeflow {

template <class Layer, int Batch>
class executor<softmax, Layer, Batch, cpu> : public executor_defaults {
  static constexpr int classes = Layer::classes;
  static constexpr std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(Batch * Layer::rows_per_sample);

 public:
  explicit executor(const layer_io<cpu>& io) : io_(io) {}

  void forward() {
    const float* in = io_.in;
    float* out = io_.out;
    typeflow::parallel_rows(rows, classes, [=](std::ptrdiff_t r) {
      softmax_row(in + r * classes, out + r * classes, classes);
    });
  }

  void backward() {
    if (!io_.d_in) return;
    const float* y = io_.out;
    float* grad = io_.d_in;
    typeflow::parallel_rows(rows, classes, [=](std::ptrdiff_t r) {
      const float* yr = y + r * classes;
      float* gr = grad + r * classes;
      float dot = 0.f;
      for (int j = 0; j < classes; ++j) dot += gr[j] * yr[j];
      for (int j = 0; j < classes; ++j) gr[j] = row_math::softmax_input_gradient(yr[j], gr[j], dot);
    });
  }

 private:
  layer_io<cpu> io_;
};

}  // namespace typeflow

// softmax: probabilities over the last axis, computed stably (max subtracted).
//
//   input (B, ..., n) -> output (B, ..., n), no parameters.
//
// Backward, in place on the gradient: d_in = y * (d_out - sum(d_out * y)).
// For training, sparse_categorical_crossentropy{.from_logits = true} on the
// logits is the faster and more accurate choice; softmax is here for models
// that output probabilities. The executors: backend/cpu/softmax.hpp.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>

#include "typeflow/contract/layer.hpp"

namespace typeflow {

// One row of softmax: what the CPU executor runs on each row
// (backend/cpu/softmax.hpp), and the reference core/row_math.hpp's formulas
// are checked against (row_math_test).
inline void softmax_row(const float* in, float* out, int n) {
  float max = in[0];
  for (int j = 1; j < n; ++j) max = in[j] > max ? in[j] : max;
  float sum = 0.f;
  for (int j = 0; j < n; ++j) {
    out[j] = std::exp(in[j] - max);
    sum += out[j];
  }
  const float inverse = 1.f / sum;
  for (int j = 0; j < n; ++j) out[j] *= inverse;
}

struct softmax {
  static std::string type_name() { return "softmax"; }

  template <class In, class Context>
  struct bind : layer_defaults {
    static_assert(layer_check<layer_at<Context::position, softmax>, given<In>, (In::rank >= 1)>::passed,
                  "softmax: the input needs at least one axis; softmax normalises the last one");
    using input_shape = In;
    using output_shape = In;
    static constexpr int classes = In::template dim<-1>;
    static constexpr std::size_t rows_per_sample = In::size / classes;
    static constexpr bool gradient_in_place = true;
    static constexpr std::size_t flops_per_sample = 3 * In::size;
  };
};

}  // namespace typeflow

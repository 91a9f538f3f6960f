// batch_normalization's per-feature and per-element arithmetic, the same on
// both devices (layers/batch_norm.hpp states the layer; backend/cpu/
// batch_norm.hpp sums each feature over the rows in one thread, the GPU's
// kernels in fixed chunks of rows, both in double):
//
//   inverse_std_of          1 / sqrt(var + epsilon), in double
//   moving_average_of       the moving statistic's update (Keras 3's)
//   normalized_output       gamma * (x - mean) * inverse_std + beta
//   normalized_gradient     d_in from d_out and the batch's sums
//   live_rows_of            the rows a partial batch's statistics count
#pragma once

#include <cmath>

#include "typeflow/core/host_device.hpp"

namespace typeflow::batch_norm_math {

// How the GPU sums a feature over the rows: in chunks of rows_per_chunk, a
// thread each, then the chunks in order; the split is the shape's alone.
struct chunking {
  int rows_per_chunk, chunks;
};
TYPEFLOW_HOST_DEVICE chunking chunking_of(int rows) {
  constexpr int most_chunks = 128;
  const int wanted = rows < most_chunks ? (rows > 0 ? rows : 1) : most_chunks;
  const int per = (rows + wanted - 1) / wanted;
  return {per > 0 ? per : 1, per > 0 ? (rows + per - 1) / per : 1};
}

// The rows a training batch's statistics count: all `rows`, or in a last
// partial batch the valid samples' (valid_samples < 0: every sample is).
TYPEFLOW_HOST_DEVICE int live_rows_of(int valid_samples, int rows_per_sample, int rows) {
  return valid_samples < 0 || valid_samples * rows_per_sample >= rows ? rows : valid_samples * rows_per_sample;
}
// What the sums over the live rows are divided by: their count, or 1 where
// there are none (a replica without samples: its statistics are 0, and the
// moving ones stay).
TYPEFLOW_HOST_DEVICE double divisor_of(int live_rows) { return live_rows > 0 ? live_rows : 1; }
// Chunk c's rows of the live ones: [c * per, min((c + 1) * per, live)).
TYPEFLOW_HOST_DEVICE int chunk_end(chunking k, int c, int live_rows) {
  const int end = (c + 1) * k.rows_per_chunk;
  return end < live_rows ? end : live_rows;
}

TYPEFLOW_HOST_DEVICE float inverse_std_of(double variance, float epsilon) {
  return static_cast<float>(1.0 / sqrt(variance + double{epsilon}));
}

// moving * momentum + value * (1 - momentum), the weight as the CPU rounds it.
TYPEFLOW_HOST_DEVICE float moving_average_of(float moving, float value, float momentum, float update_weight) {
  return moving * momentum + value * update_weight;
}

TYPEFLOW_HOST_DEVICE float normalized_of(float x, float mean, float inverse_std) { return (x - mean) * inverse_std; }

// gamma and beta absent (Options.scale / center off): 1 and 0.
TYPEFLOW_HOST_DEVICE float normalized_output(float x, float mean, float inverse_std, const float* gamma,
                                             const float* beta, int j) {
  const float normalized = normalized_of(x, mean, inverse_std);
  return (gamma ? gamma[j] * normalized : normalized) + (beta ? beta[j] : 0.f);
}

// factor = gamma * inverse_std; mean_dy and mean_dy_normalized: Σ d_out and
// Σ d_out * x̂ over the rows, divided by rows.
TYPEFLOW_HOST_DEVICE float normalized_gradient(float dy, float x, float mean, float inverse_std, float factor,
                                               float mean_dy, float mean_dy_normalized) {
  return factor * (dy - mean_dy - normalized_of(x, mean, inverse_std) * mean_dy_normalized);
}

}  // namespace typeflow::batch_norm_math

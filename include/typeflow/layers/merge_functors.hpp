// The merge layers' element functors, one call per index, which
// model/merge_executor.hpp runs on either device: OpenMP threads on the CPU;
// on CUDA, for_each_index, compiled for each of them in typeflow::cuda's
// kernel library (src/cuda/for_each_index.cu). Plain data and
// TYPEFLOW_HOST_DEVICE calls: nothing here needs the model's types.
#pragma once

#include <cstddef>

#include "typeflow/core/host_device.hpp"

namespace typeflow {

namespace detail::merge_fn {

// out = alpha * a + beta * b (b may be null when beta is 0)
struct axpby {
  const float* a;
  const float* b;
  float* out;
  float alpha, beta;
  TYPEFLOW_HOST_DEVICE void operator()(std::size_t i) const { out[i] = alpha * a[i] + (b ? beta * b[i] : 0.f); }
};
struct product {
  const float* a;
  const float* b;
  float* out;
  TYPEFLOW_HOST_DEVICE void operator()(std::size_t i) const { out[i] = a[i] * b[i]; }
};
// out = the larger (smaller) of best and x; winner records which input won.
// Ties keep the earlier input, as TensorFlow's gradient of maximum does.
template <bool Max>
struct extreme {
  const float* best;
  const float* x;
  float* out;
  float* winner;
  float index;  // x's input number
  bool first;   // best is input 0
  TYPEFLOW_HOST_DEVICE void operator()(std::size_t i) const {
    const float b = best[i], v = x[i];
    const bool wins = Max ? v > b : v < b;
    winner[i] = wins ? index : (first ? 0.f : winner[i]);
    out[i] = wins ? v : b;
  }
};
// d_in = d_out where input j won, else 0.
struct route {
  const float* d_out;
  const float* winner;
  float* d_in;
  float index;
  TYPEFLOW_HOST_DEVICE void operator()(std::size_t i) const { d_in[i] = winner[i] == index ? d_out[i] : 0.f; }
};
// One input's part of a concatenation: rows of `part` floats placed at
// `offset` within output rows of `whole` floats (forward), or taken back (backward).
struct place {
  const float* from;
  float* to;
  std::size_t part, whole, offset;
  bool gather;  // false: from = input, to = output; true: from = output, to = input
  TYPEFLOW_HOST_DEVICE void operator()(std::size_t i) const {
    const std::size_t row = i / part, at = row * whole + offset + i % part;
    if (gather)
      to[i] = from[at];
    else
      to[at] = from[i];
  }
};
// out[r] = sum_k a[r, k] b[r, k]: one sample per index.
struct row_dot {
  const float* a;
  const float* b;
  float* out;
  std::size_t n;
  TYPEFLOW_HOST_DEVICE void operator()(std::size_t r) const {
    float sum = 0.f;
    for (std::size_t k = 0; k < n; ++k) sum += a[r * n + k] * b[r * n + k];
    out[r] = sum;
  }
};
// d_in[r, k] = d_out[r] * other[r, k]
struct scale_rows {
  const float* d_out;
  const float* other;
  float* d_in;
  std::size_t n;
  TYPEFLOW_HOST_DEVICE void operator()(std::size_t i) const { d_in[i] = d_out[i / n] * other[i]; }
};

}  // namespace detail::merge_fn

}  // namespace typeflow

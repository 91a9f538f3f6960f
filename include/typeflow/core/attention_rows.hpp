// causal_self_attention's per-row arithmetic on the GPU (backend/cuda/
// kernels/attention.cuh), host and device, so that
// tests/unit/attention_rows_test.cpp replays it in the kernels' thread layout
// against the CPU layer (backend/cpu/attention.hpp). The (T, T) matrix of
// probabilities is never stored: each query row keeps its softmax
// statistics (the largest score m_i and 1 / l_i), and every probability is
// recomputed from them where it is needed.
//
// One (sample, head) pair, hd = width columns of the (rows, 3D) qkv matrix
// (rows `stride` apart) and of the (rows, D) heads' concatenation y and its
// gradient d_y (rows `y_stride` apart):
//
//   s_ij  = q_i · k_j                                            j <= i
//   m_i   = max_j s_ij        l_i = Σ_j exp(scale s_ij - scale m_i)
//   P_ij  = round(exp(scale s_ij - scale m_i) / l_i)
//   P'_ij = keep_ij ? round(P_ij keep_scale) : 0      (P itself without dropout)
//   y_i   = Σ_j P'_ij v_j
// backward, with g_ij = keep_ij ? (d_y_i · v_j) keep_scale : 0 (d_y_i · v_j
// without dropout):
//   δ_i   = Σ_j P_ij g_ij
//   dS_ij = round(scale P_ij (g_ij - δ_i))
//   d_q_i = Σ_{j<=i} dS_ij k_j     d_k_j = Σ_{i>=j} dS_ij q_i     d_v_j = Σ_{i>=j} P'_ij d_y_i
//
// round is to the compute dtype (Value: float, f16 or bf16; float rounds
// nothing), where the CPU layer rounds P, P' and dS; q, k, v and d_y arrive
// rounded. A thread holds one row's vectors in registers of Capacity floats
// (the head width rounded up to 16, 32, 64 or 128), and the score s_ij is the
// same sum, in the same order, in all three passes, so the forward's P and
// the backward's are the same numbers.
#pragma once

#include <cmath>
#include <type_traits>

#include "typeflow/core/host_device.hpp"

#if defined(__CUDACC__)
#define TYPEFLOW_UNROLL _Pragma("unroll")
#else
#define TYPEFLOW_UNROLL
#endif

namespace typeflow::attention_rows {

// A query row's softmax statistics.
struct statistics {
  float largest;      // m_i
  float inverse_sum;  // 1 / l_i
};

// The head widths a kernel is built for: the width rounded up to one of these.
TYPEFLOW_HOST_DEVICE constexpr int capacity_for(int width) {
  return width <= 16 ? 16 : width <= 32 ? 32 : width <= 64 ? 64 : width <= 128 ? 128 : 0;
}

template <class Value>
TYPEFLOW_HOST_DEVICE float rounded(float x) {
  if constexpr (std::is_same_v<Value, float>) return x;
  else return static_cast<float>(Value(x));
}

TYPEFLOW_HOST_DEVICE float exp_of(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

// to[0..width) = from[0..width), zeros after.
template <int Capacity>
TYPEFLOW_HOST_DEVICE void load(float (&to)[Capacity], const float* from, int width) {
  TYPEFLOW_UNROLL
  for (int d = 0; d < Capacity; ++d) to[d] = d < width ? from[d] : 0.f;
}

// Σ_d a[d] b[d] over d < width, in order.
template <int Capacity>
TYPEFLOW_HOST_DEVICE float dot(const float (&a)[Capacity], const float* b, int width) {
  float sum = 0.f;
  TYPEFLOW_UNROLL
  for (int d = 0; d < Capacity; ++d)
    if (d < width) sum += a[d] * b[d];
  return sum;
}

// acc[d] += factor * b[d] over d < width.
template <int Capacity>
TYPEFLOW_HOST_DEVICE void add_scaled(float (&acc)[Capacity], float factor, const float* b, int width) {
  TYPEFLOW_UNROLL
  for (int d = 0; d < Capacity; ++d)
    if (d < width) acc[d] += factor * b[d];
}

template <int Capacity>
TYPEFLOW_HOST_DEVICE void store(float* to, const float (&from)[Capacity], int width) {
  TYPEFLOW_UNROLL
  for (int d = 0; d < Capacity; ++d)
    if (d < width) to[d] = from[d];
}

// No attention dropout: every weight kept, unscaled.
struct keep_all {
  static constexpr bool active = false;
  float scale = 1.f;
  TYPEFLOW_HOST_DEVICE bool operator()(int, int) const { return true; }
};

template <class Value>
TYPEFLOW_HOST_DEVICE float probability(float score, statistics st, float scale) {
  return rounded<Value>(exp_of(score * scale - st.largest * scale) * st.inverse_sum);
}
// P'_ij from P_ij.
template <class Value, class Keep>
TYPEFLOW_HOST_DEVICE float dropped(float p, const Keep& keep, int i, int j) {
  if constexpr (!Keep::active) return p;
  else return keep(i, j) ? rounded<Value>(p * keep.scale) : 0.f;
}
// g_ij from d_y_i · v_j.
template <class Keep>
TYPEFLOW_HOST_DEVICE float through_dropout(float g, const Keep& keep, int i, int j) {
  if constexpr (!Keep::active) return g;
  else return keep(i, j) ? g * keep.scale : 0.f;
}

// Forward, first pass: query i's statistics over keys 0..i (k: key 0's row).
template <int Capacity>
TYPEFLOW_HOST_DEVICE statistics row_statistics(const float (&q)[Capacity], const float* k, int stride, int i, int width,
                                               float scale) {
  float largest = -INFINITY, sum = 0.f;
  for (int j = 0; j <= i; ++j) {
    const float s = dot(q, k + static_cast<long long>(j) * stride, width);
    if (s > largest) {
      sum *= exp_of((largest - s) * scale);
      largest = s;
    }
    sum += exp_of((s - largest) * scale);
  }
  return {largest, 1.f / sum};
}

// Forward, second pass: y_i (width floats at y).
template <class Value, int Capacity, class Keep>
TYPEFLOW_HOST_DEVICE void row_output(const float (&q)[Capacity], const float* k, const float* v, int stride, int i,
                                     int width, float scale, statistics st, const Keep& keep, float* y) {
  float acc[Capacity];
  TYPEFLOW_UNROLL
  for (int d = 0; d < Capacity; ++d) acc[d] = 0.f;
  for (int j = 0; j <= i; ++j) {
    const long long at = static_cast<long long>(j) * stride;
    const float p = dropped<Value>(probability<Value>(dot(q, k + at, width), st, scale), keep, i, j);
    add_scaled(acc, p, v + at, width);
  }
  store(y, acc, width);
}

// Backward, query side: d_q_i (width floats at dq); returns δ_i.
template <class Value, int Capacity, class Keep>
TYPEFLOW_HOST_DEVICE float row_query_gradient(const float (&q)[Capacity], const float (&dy)[Capacity], const float* k,
                                              const float* v, int stride, int i, int width, float scale, statistics st,
                                              const Keep& keep, float* dq) {
  float delta = 0.f;
  for (int j = 0; j <= i; ++j) {
    const long long at = static_cast<long long>(j) * stride;
    const float p = probability<Value>(dot(q, k + at, width), st, scale);
    delta += p * through_dropout(dot(dy, v + at, width), keep, i, j);
  }
  float acc[Capacity];
  TYPEFLOW_UNROLL
  for (int d = 0; d < Capacity; ++d) acc[d] = 0.f;
  for (int j = 0; j <= i; ++j) {
    const long long at = static_cast<long long>(j) * stride;
    const float p = probability<Value>(dot(q, k + at, width), st, scale);
    const float g = through_dropout(dot(dy, v + at, width), keep, i, j);
    add_scaled(acc, rounded<Value>(scale * p * (g - delta)), k + at, width);
  }
  store(dq, acc, width);
  return delta;
}

// Backward, key side: d_k_j and d_v_j (width floats at dk, dv), over the
// queries i in [j, steps); q, dy: row 0's; stats and delta: row 0's of the
// pair (statistics and δ of every query row, from the passes above).
template <class Value, int Capacity, class Keep>
TYPEFLOW_HOST_DEVICE void row_key_gradient(const float (&k)[Capacity], const float (&v)[Capacity], const float* q,
                                           const float* dy, int stride, int y_stride, const statistics* stats,
                                           const float* delta, int j, int steps, int width, float scale,
                                           const Keep& keep, float* dk, float* dv) {
  float dk_acc[Capacity], dv_acc[Capacity];
  TYPEFLOW_UNROLL
  for (int d = 0; d < Capacity; ++d) dk_acc[d] = dv_acc[d] = 0.f;
  for (int i = j; i < steps; ++i) {
    const float* qi = q + static_cast<long long>(i) * stride;
    const float* dyi = dy + static_cast<long long>(i) * y_stride;
    const float p = probability<Value>(dot(k, qi, width), stats[i], scale);
    add_scaled(dv_acc, dropped<Value>(p, keep, i, j), dyi, width);
    const float g = through_dropout(dot(v, dyi, width), keep, i, j);
    add_scaled(dk_acc, rounded<Value>(scale * p * (g - delta[i])), qi, width);
  }
  store(dk, dk_acc, width);
  store(dv, dv_acc, width);
}

}  // namespace typeflow::attention_rows

// The kernels of backend/cuda/attention.hpp and its launchers' definitions.
// Compiled once by nvcc into typeflow::cuda's kernel library
// (src/cuda/attention.cu); to build without that library, compile that one
// source into your program instead. Include it nowhere else.
//
// Thread r of a launch is query (or key) row i = r % T of the (sample, head)
// pair r / T: a warp holds consecutive rows of one pair, which walk the
// pair's keys (or queries) in step and read the same row at once.
#pragma once
#include "typeflow/backend/cuda/attention.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/core/attention_rows.hpp"
#include "typeflow/core/half.hpp"
#include "typeflow/core/random.hpp"
#include "typeflow/layers/dropout_mask.hpp"

namespace typeflow::backend::cuda {

namespace attention_detail {

namespace ar = typeflow::attention_rows;
constexpr int threads = 128;

// Where thread r's row lies: its pair's q, k and v at row 0, and row i.
struct row_of {
  int pair, i, b, h;
  std::size_t q0;  // offset of the pair's q at row 0 in qkv
  std::size_t y0;  // offset of the pair's columns at row 0 in y / d_y
  __device__ row_of(long long r, const attention_shape& s) {
    pair = static_cast<int>(r / s.steps);
    i = static_cast<int>(r % s.steps);
    b = pair / s.heads;
    h = pair % s.heads;
    const std::size_t D = static_cast<std::size_t>(s.heads) * s.head_width;
    q0 = static_cast<std::size_t>(b) * s.steps * 3 * D + static_cast<std::size_t>(h) * s.head_width;
    y0 = static_cast<std::size_t>(b) * s.steps * D + static_cast<std::size_t>(h) * s.head_width;
  }
};

__device__ __forceinline__ attention_keep keep_of(const attention_dropout& d, std::uint32_t threshold, int pair,
                                                  int steps) {
  const std::uint64_t step = d.draw.device_step ? *d.draw.device_step : d.draw.step;
  const dropout_mask mask{random_stream{d.draw.layer_seed, step}, threshold, 1.f / (1.f - d.rate)};  // dropout_scale's
  return attention_keep{mask, static_cast<std::uint64_t>(pair) * steps * steps, steps, mask.scale};
}

template <bool Dropping, class F>
__device__ __forceinline__ void with_keep(const attention_dropout& d, std::uint32_t threshold, int pair, int steps,
                                          F&& f) {
  if constexpr (Dropping) f(keep_of(d, threshold, pair, steps));
  else f(ar::keep_all{});
}

template <class Value, int Capacity, bool Dropping>
__global__ void __launch_bounds__(threads)
    forward_rows(const float* qkv, float* y, ar::statistics* stats, attention_shape s, attention_dropout d,
                 std::uint32_t threshold) {
  const long long r = static_cast<long long>(blockIdx.x) * threads + threadIdx.x;
  if (r >= static_cast<long long>(s.batch) * s.heads * s.steps) return;
  const row_of at(r, s);
  const int D = s.heads * s.head_width, stride = 3 * D;
  const float* q0 = qkv + at.q0;
  float q[Capacity];
  ar::load(q, q0 + static_cast<std::size_t>(at.i) * stride, s.head_width);
  const ar::statistics st = ar::row_statistics(q, q0 + D, stride, at.i, s.head_width, s.scale);
  stats[r] = st;
  float* yi = y + at.y0 + static_cast<std::size_t>(at.i) * D;
  with_keep<Dropping>(d, threshold, at.pair, s.steps, [&](const auto& keep) {
    ar::row_output<Value>(q, q0 + D, q0 + 2 * D, stride, at.i, s.head_width, s.scale, st, keep, yi);
  });
}

template <class Value, int Capacity, bool Dropping>
__global__ void __launch_bounds__(threads)
    query_rows(const float* qkv, const float* d_y, const ar::statistics* stats, float* delta, float* d_qkv,
               attention_shape s, attention_dropout d, std::uint32_t threshold) {
  const long long r = static_cast<long long>(blockIdx.x) * threads + threadIdx.x;
  if (r >= static_cast<long long>(s.batch) * s.heads * s.steps) return;
  const row_of at(r, s);
  const int D = s.heads * s.head_width, stride = 3 * D;
  const float* q0 = qkv + at.q0;
  float q[Capacity], dy[Capacity];
  ar::load(q, q0 + static_cast<std::size_t>(at.i) * stride, s.head_width);
  ar::load(dy, d_y + at.y0 + static_cast<std::size_t>(at.i) * D, s.head_width);
  float* dq = d_qkv + at.q0 + static_cast<std::size_t>(at.i) * stride;
  with_keep<Dropping>(d, threshold, at.pair, s.steps, [&](const auto& keep) {
    delta[r] = ar::row_query_gradient<Value>(q, dy, q0 + D, q0 + 2 * D, stride, at.i, s.head_width, s.scale,
                                             stats[r], keep, dq);
  });
}

// After query_rows: reads every row's δ.
template <class Value, int Capacity, bool Dropping>
__global__ void __launch_bounds__(threads)
    key_rows(const float* qkv, const float* d_y, const ar::statistics* stats, const float* delta, float* d_qkv,
             attention_shape s, attention_dropout d, std::uint32_t threshold) {
  const long long r = static_cast<long long>(blockIdx.x) * threads + threadIdx.x;
  if (r >= static_cast<long long>(s.batch) * s.heads * s.steps) return;
  const row_of at(r, s);  // at.i is the key row j
  const int D = s.heads * s.head_width, stride = 3 * D;
  const float* q0 = qkv + at.q0;
  float k[Capacity], v[Capacity];
  ar::load(k, q0 + D + static_cast<std::size_t>(at.i) * stride, s.head_width);
  ar::load(v, q0 + 2 * D + static_cast<std::size_t>(at.i) * stride, s.head_width);
  float* dk = d_qkv + at.q0 + D + static_cast<std::size_t>(at.i) * stride;
  const std::size_t pair_rows = static_cast<std::size_t>(at.pair) * s.steps;
  with_keep<Dropping>(d, threshold, at.pair, s.steps, [&](const auto& keep) {
    ar::row_key_gradient<Value>(k, v, q0, d_y + at.y0, stride, D, stats + pair_rows, delta + pair_rows, at.i, s.steps,
                                s.head_width, s.scale, keep, dk, dk + D);
  });
}

// Decoding: thread (b, h) attends from sample b's fed query over its
// cached keys and values 0..position (rows D apart).
template <class Value, int Capacity>
__global__ void __launch_bounds__(threads)
    decode_rows(const float* qkv, const float* caches, float* y, attention_shape s, int position) {
  const int r = static_cast<int>(blockIdx.x) * threads + static_cast<int>(threadIdx.x);
  if (r >= s.batch * s.heads) return;
  const int b = r / s.heads, h = r % s.heads, D = s.heads * s.head_width;
  const std::size_t cache = static_cast<std::size_t>(s.steps) * D;
  const float* keys = caches + static_cast<std::size_t>(b) * 2 * cache + static_cast<std::size_t>(h) * s.head_width;
  float q[Capacity];
  ar::load(q, qkv + static_cast<std::size_t>(b) * 3 * D + static_cast<std::size_t>(h) * s.head_width, s.head_width);
  const ar::statistics st = ar::row_statistics(q, keys, D, position, s.head_width, s.scale);
  ar::row_output<Value>(q, keys, keys + cache, D, position, s.head_width, s.scale, st, ar::keep_all{},
                        y + static_cast<std::size_t>(b) * D + static_cast<std::size_t>(h) * s.head_width);
}

inline void check(const attention_shape& s, const attention_dropout& d, const char* what) {
  if (s.batch <= 0 || s.steps <= 0 || s.heads <= 0 || s.head_width <= 0 ||
      s.head_width > attention_max_head_width || !(d.rate >= 0.f && d.rate < 1.f))
    throw std::invalid_argument(std::string("typeflow: ") + what + ": batch " + std::to_string(s.batch) + ", steps " +
                                std::to_string(s.steps) + ", heads " + std::to_string(s.heads) + ", head width " +
                                std::to_string(s.head_width) + " (at most " +
                                std::to_string(attention_max_head_width) + "), dropout rate " +
                                std::to_string(d.rate) + ": out of range");
}

inline unsigned blocks_for(const attention_shape& s) {
  const long long n = static_cast<long long>(s.batch) * s.heads * s.steps;
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// f.template operator()<Value, Capacity, Dropping>() for the run-time choices.
template <class F>
void dispatch(attention_rounding rounding, int width, bool dropping, F&& f) {
  auto capacity = [&]<class Value, bool Dropping>() {
    const int c = ar::capacity_for(width);
    if (c <= 32) f.template operator()<Value, 32, Dropping>();
    else if (c == 64) f.template operator()<Value, 64, Dropping>();
    else f.template operator()<Value, 128, Dropping>();
  };
  auto value = [&]<bool Dropping>() {
    switch (rounding) {
      case attention_rounding::none: capacity.template operator()<float, Dropping>(); break;
      case attention_rounding::float16: capacity.template operator()<typeflow::f16, Dropping>(); break;
      case attention_rounding::bfloat16: capacity.template operator()<typeflow::bf16, Dropping>(); break;
    }
  };
  if (dropping) value.template operator()<true>();
  else value.template operator()<false>();
}

}  // namespace attention_detail

void attention_decode(const float* qkv, float* caches, float* y, const attention_shape& shape, int position,
                      attention_rounding rounding, cudaStream_t stream) {
  namespace ad = attention_detail;
  ad::check(shape, {}, "attention_decode");
  if (position < 0 || position >= shape.steps)
    throw std::invalid_argument("typeflow: attention_decode: position " + std::to_string(position) +
                                " outside the caches' " + std::to_string(shape.steps) + " positions");
  const std::size_t D = static_cast<std::size_t>(shape.heads) * shape.head_width;
  const std::size_t cache = static_cast<std::size_t>(shape.steps) * D;
  // Each sample's k and v rows into its caches at `position`.
  for (int part = 1; part <= 2; ++part)
    TYPEFLOW_CUDA_CHECK(cudaMemcpy2DAsync(caches + (part - 1) * cache + static_cast<std::size_t>(position) * D,
                                          2 * cache * sizeof(float), qkv + part * D, 3 * D * sizeof(float),
                                          D * sizeof(float), static_cast<std::size_t>(shape.batch),
                                          cudaMemcpyDeviceToDevice, stream));
  const unsigned blocks = static_cast<unsigned>((shape.batch * shape.heads + ad::threads - 1) / ad::threads);
  ad::dispatch(rounding, shape.head_width, false, [&]<class Value, int Capacity, bool>() {
    ad::decode_rows<Value, Capacity><<<blocks, ad::threads, 0, stream>>>(qkv, caches, y, shape, position);
  });
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

void attention_forward(const float* qkv, float* y, float* statistics, const attention_shape& shape,
                       const attention_dropout& dropout, attention_rounding rounding, cudaStream_t stream) {
  namespace ad = attention_detail;
  ad::check(shape, dropout, "attention_forward");
  const std::uint32_t threshold = dropout_threshold(dropout.rate);
  auto* stats = reinterpret_cast<ad::ar::statistics*>(statistics);
  ad::dispatch(rounding, shape.head_width, dropout.rate > 0.f, [&]<class Value, int Capacity, bool Dropping>() {
    ad::forward_rows<Value, Capacity, Dropping>
        <<<ad::blocks_for(shape), ad::threads, 0, stream>>>(qkv, y, stats, shape, dropout, threshold);
  });
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

void attention_backward(const float* qkv, const float* d_y, const float* statistics, float* delta, float* d_qkv,
                        const attention_shape& shape, const attention_dropout& dropout, attention_rounding rounding,
                        cudaStream_t stream) {
  namespace ad = attention_detail;
  ad::check(shape, dropout, "attention_backward");
  const std::uint32_t threshold = dropout_threshold(dropout.rate);
  const auto* stats = reinterpret_cast<const ad::ar::statistics*>(statistics);
  ad::dispatch(rounding, shape.head_width, dropout.rate > 0.f, [&]<class Value, int Capacity, bool Dropping>() {
    ad::query_rows<Value, Capacity, Dropping>
        <<<ad::blocks_for(shape), ad::threads, 0, stream>>>(qkv, d_y, stats, delta, d_qkv, shape, dropout, threshold);
    ad::key_rows<Value, Capacity, Dropping>
        <<<ad::blocks_for(shape), ad::threads, 0, stream>>>(qkv, d_y, stats, delta, d_qkv, shape, dropout, threshold);
  });
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace typeflow::backend::cuda

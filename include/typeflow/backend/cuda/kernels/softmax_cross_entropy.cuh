// The kernels of backend/cuda/softmax_cross_entropy.hpp and its launchers' definitions.
// Compiled once by nvcc into typeflow::cuda's kernel library
// (src/cuda/softmax_cross_entropy.cu); to build without that library, compile that one
// source into your program instead. Include it nowhere else: the launchers
// are ordinary (not inline) functions.
#pragma once
#include "typeflow/backend/cuda/softmax_cross_entropy.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/core/row_math.hpp"

namespace typeflow::backend::cuda {

namespace softmax_detail {

namespace rm = typeflow::row_math;
namespace gpu = typeflow::row_math::gpu;

__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fc00000); }

enum class row_state { compute, padding, bad_label };

// Classifies a row (uniform over its group: every thread reads the same label).
__device__ __forceinline__ row_state classify(int r, const std::int32_t* labels, int valid_rows, int n, int& y) {
  if (r >= valid_rows) return row_state::padding;
  y = labels[r];
  return (y < 0 || y >= n) ? row_state::bad_label : row_state::compute;
}

// Padding and bad rows: zero gradient; loss 0 or NaN (the flag counted once, by thread 0 of the group).
template <bool kVec, int kGroup, class T = float>
__device__ __forceinline__ void write_dead_row(row_state state, int r, int t, T* grad_row, float* row_loss,
                                               int* bad_labels, int n) {
  using chunk = gpu::chunk<kVec, T>;
  constexpr int stride = (kGroup == 0 ? 1024 : kGroup) * chunk::width;
  if (grad_row)
    for (int j = t * chunk::width; j < n; j += stride) chunk::filled(0.f).store_within(grad_row + j, j, n);
  if (t == 0) {
    if (row_loss) row_loss[r] = state == row_state::padding ? 0.f : quiet_nan();
    if (state == row_state::bad_label && bad_labels) atomicAdd(bad_labels, 1);
  }
}

// ---------------------------------------------------------------------------
// From logits, stored as T (float, or a GPU head's bf16): read into float,
// the gradient computed in float and stored as T.

template <int kGroup, bool kVec, class T>
__global__ void __launch_bounds__(gpu::block_threads<kGroup>)
    xent_logits_held(const T* z, const std::int32_t* labels, T* dz, float* row_loss, int rows, int n,
                     int stride, int valid_rows, float scale, int* bad_labels) {
  using row = gpu::held_row<kGroup, kVec, T>;
  using chunk = typename row::chunk_type;
  constexpr int W = row::width;
  constexpr int kRows = gpu::rows_per_block<kGroup>;
  __shared__ rm::max_sum slots[gpu::slot_count<kGroup>];
  const int t = static_cast<int>(threadIdx.x) % kGroup;
  for (int r = static_cast<int>(blockIdx.x) * kRows + static_cast<int>(threadIdx.x) / kGroup; r < rows;
       r += static_cast<int>(gridDim.x) * kRows) {
    const std::size_t base = static_cast<std::size_t>(r) * static_cast<std::size_t>(stride);
    int y = 0;
    const row_state state = classify(r, labels, valid_rows, n, y);
    if (state != row_state::compute) {  // uniform over the group (block when kGroup > 32)
      write_dead_row<kVec, kGroup, T>(state, r, t, dz ? dz + base : nullptr, row_loss, bad_labels, n);
      continue;
    }
    chunk v[row::chunks];
    rm::max_sum m = rm::max_sum_empty();
#pragma unroll
    for (int i = 0; i < row::chunks; ++i) {
      const int j = row::first_column(t, i);
      if (j < n) {
        v[i] = chunk::load(z + base + j);
#pragma unroll
        for (int e = 0; e < W; ++e)
          if (j + e < n) m = rm::max_sum_push(m, v[i].v[e]);  // a padded row's last chunk: padding left out
      }
    }
    m = gpu::group_reduce<kGroup>(m, rm::max_sum_empty(), rm::max_sum_merger{}, slots);
    const float lse = rm::log_sum_exp(m);
#pragma unroll
    for (int i = 0; i < row::chunks; ++i) {
      const int j = row::first_column(t, i);
      if (j < n) {
        chunk g;
#pragma unroll
        for (int e = 0; e < W; ++e) {
          const bool is_label = j + e == y;
          g.v[e] = rm::softmax_cross_entropy_gradient(v[i].v[e], lse, is_label, scale);
          if (is_label && row_loss) row_loss[r] = rm::softmax_cross_entropy_loss(v[i].v[e], lse);
        }
        if (dz) g.store_within(dz + base + j, j, n);  // never the padding
      }
    }
  }
}

template <bool kVec, class T>
__global__ void __launch_bounds__(1024)
    xent_logits_streamed(const T* z, const std::int32_t* labels, T* dz, float* row_loss, int rows, int n,
                         int stride, int valid_rows, float scale, int* bad_labels) {
  using chunk = gpu::chunk<kVec, T>;
  constexpr int W = chunk::width;
  constexpr int kStride = 1024 * W;
  __shared__ rm::max_sum slots[gpu::slot_count<0>];
  const int t = static_cast<int>(threadIdx.x);
  for (int r = static_cast<int>(blockIdx.x); r < rows; r += static_cast<int>(gridDim.x)) {
    const std::size_t base = static_cast<std::size_t>(r) * static_cast<std::size_t>(stride);
    int y = 0;
    const row_state state = classify(r, labels, valid_rows, n, y);
    if (state != row_state::compute) {  // uniform over the block
      write_dead_row<kVec, 0, T>(state, r, t, dz ? dz + base : nullptr, row_loss, bad_labels, n);
      continue;
    }
    rm::max_sum m = rm::max_sum_empty();
    for (int j = t * W; j < n; j += kStride) {
      const chunk v = chunk::load(z + base + j);
#pragma unroll
      for (int e = 0; e < W; ++e)
        if (j + e < n) m = rm::max_sum_push(m, v.v[e]);
    }
    m = gpu::group_reduce<0>(m, rm::max_sum_empty(), rm::max_sum_merger{}, slots);
    const float lse = rm::log_sum_exp(m);
    // Same columns per thread as above, so dz may be z.
    for (int j = t * W; j < n; j += kStride) {
      const chunk v = chunk::load(z + base + j);
      chunk g;
#pragma unroll
      for (int e = 0; e < W; ++e) {
        const bool is_label = j + e == y;
        g.v[e] = rm::softmax_cross_entropy_gradient(v.v[e], lse, is_label, scale);
        if (is_label && row_loss) row_loss[r] = rm::softmax_cross_entropy_loss(v.v[e], lse);
      }
      if (dz) g.store_within(dz + base + j, j, n);  // never the padding
    }
  }
}

// ---------------------------------------------------------------------------
// From probabilities. The group reduces (sum p, p[y]): only p[y]'s owner adds
// it, so every thread learns p[y] without reading another thread's element.

template <int kGroup, bool kVec>
__global__ void __launch_bounds__(gpu::block_threads<kGroup>)
    xent_probabilities_held(const float* p, const std::int32_t* labels, float* dp, float* row_loss, int rows, int n,
                            int stride, int valid_rows, float scale, int* bad_labels) {
  using row = gpu::held_row<kGroup, kVec>;
  using chunk = typename row::chunk_type;
  constexpr int W = row::width;
  constexpr int kRows = gpu::rows_per_block<kGroup>;
  __shared__ rm::sum_pair slots[gpu::slot_count<kGroup>];
  const int t = static_cast<int>(threadIdx.x) % kGroup;
  for (int r = static_cast<int>(blockIdx.x) * kRows + static_cast<int>(threadIdx.x) / kGroup; r < rows;
       r += static_cast<int>(gridDim.x) * kRows) {
    const std::size_t base = static_cast<std::size_t>(r) * static_cast<std::size_t>(stride);
    int y = 0;
    const row_state state = classify(r, labels, valid_rows, n, y);
    if (state != row_state::compute) {
      write_dead_row<kVec, kGroup>(state, r, t, dp ? dp + base : nullptr, row_loss, bad_labels, n);
      continue;
    }
    rm::sum_pair s{0.f, 0.f};
#pragma unroll
    for (int i = 0; i < row::chunks; ++i) {
      const int j = row::first_column(t, i);
      if (j < n) {
        const chunk v = chunk::load(p + base + j);
#pragma unroll
        for (int e = 0; e < W; ++e) {
          s.first += v.v[e];
          if (j + e == y) s.second = v.v[e];
        }
      }
    }
    s = gpu::group_reduce<kGroup>(s, rm::sum_pair{0.f, 0.f}, rm::sum_pair_merger{}, slots);
    const rm::probability_loss loss = rm::sparse_probability_loss(s.second, s.first, scale);
    if (t == 0 && row_loss) row_loss[r] = loss.loss;
    if (dp) {
#pragma unroll
      for (int i = 0; i < row::chunks; ++i) {
        const int j = row::first_column(t, i);
        if (j < n) {
          chunk g;
#pragma unroll
          for (int e = 0; e < W; ++e) g.v[e] = j + e == y ? loss.shared - loss.label_extra : loss.shared;
          g.store(dp + base + j);
        }
      }
    }
  }
}

template <bool kVec>
__global__ void __launch_bounds__(1024)
    xent_probabilities_streamed(const float* p, const std::int32_t* labels, float* dp, float* row_loss, int rows, int n,
                                int stride, int valid_rows, float scale, int* bad_labels) {
  using chunk = gpu::chunk<kVec>;
  constexpr int W = chunk::width;
  constexpr int kStride = 1024 * W;
  __shared__ rm::sum_pair slots[gpu::slot_count<0>];
  const int t = static_cast<int>(threadIdx.x);
  for (int r = static_cast<int>(blockIdx.x); r < rows; r += static_cast<int>(gridDim.x)) {
    const std::size_t base = static_cast<std::size_t>(r) * static_cast<std::size_t>(stride);
    int y = 0;
    const row_state state = classify(r, labels, valid_rows, n, y);
    if (state != row_state::compute) {
      write_dead_row<kVec, 0>(state, r, t, dp ? dp + base : nullptr, row_loss, bad_labels, n);
      continue;
    }
    rm::sum_pair s{0.f, 0.f};
    for (int j = t * W; j < n; j += kStride) {
      const chunk v = chunk::load(p + base + j);
#pragma unroll
      for (int e = 0; e < W; ++e) {
        s.first += v.v[e];
        if (j + e == y) s.second = v.v[e];
      }
    }
    s = gpu::group_reduce<0>(s, rm::sum_pair{0.f, 0.f}, rm::sum_pair_merger{}, slots);
    const rm::probability_loss loss = rm::sparse_probability_loss(s.second, s.first, scale);
    if (t == 0 && row_loss) row_loss[r] = loss.loss;
    if (dp)
      for (int j = t * W; j < n; j += kStride) {  // writes only: the values read above are no longer needed
        chunk g;
#pragma unroll
        for (int e = 0; e < W; ++e) g.v[e] = j + e == y ? loss.shared - loss.label_extra : loss.shared;
        g.store(dp + base + j);
      }
  }
}

// ---------------------------------------------------------------------------
// Softmax.

template <int kGroup, bool kVec>
__global__ void __launch_bounds__(gpu::block_threads<kGroup>) softmax_held(const float* z, float* out, int rows, int n) {
  using row = gpu::held_row<kGroup, kVec>;
  using chunk = typename row::chunk_type;
  constexpr int W = row::width;
  constexpr int kRows = gpu::rows_per_block<kGroup>;
  __shared__ rm::max_sum slots[gpu::slot_count<kGroup>];
  const int t = static_cast<int>(threadIdx.x) % kGroup;
  for (int r = static_cast<int>(blockIdx.x) * kRows + static_cast<int>(threadIdx.x) / kGroup; r < rows;
       r += static_cast<int>(gridDim.x) * kRows) {
    const std::size_t base = static_cast<std::size_t>(r) * static_cast<std::size_t>(n);
    chunk v[row::chunks];
    rm::max_sum m = rm::max_sum_empty();
#pragma unroll
    for (int i = 0; i < row::chunks; ++i) {
      const int j = row::first_column(t, i);
      if (j < n) {
        v[i] = chunk::load(z + base + j);
#pragma unroll
        for (int e = 0; e < W; ++e) m = rm::max_sum_push(m, v[i].v[e]);
      }
    }
    m = gpu::group_reduce<kGroup>(m, rm::max_sum_empty(), rm::max_sum_merger{}, slots);
    const float inverse_sum = 1.f / m.sum;
#pragma unroll
    for (int i = 0; i < row::chunks; ++i) {
      const int j = row::first_column(t, i);
      if (j < n) {
        chunk q;
#pragma unroll
        for (int e = 0; e < W; ++e) q.v[e] = rm::softmax_probability(v[i].v[e], m.max, inverse_sum);
        q.store(out + base + j);
      }
    }
  }
}

template <bool kVec>
__global__ void __launch_bounds__(1024) softmax_streamed(const float* z, float* out, int rows, int n) {
  using chunk = gpu::chunk<kVec>;
  constexpr int W = chunk::width;
  constexpr int kStride = 1024 * W;
  __shared__ rm::max_sum slots[gpu::slot_count<0>];
  const int t = static_cast<int>(threadIdx.x);
  for (int r = static_cast<int>(blockIdx.x); r < rows; r += static_cast<int>(gridDim.x)) {
    const std::size_t base = static_cast<std::size_t>(r) * static_cast<std::size_t>(n);
    rm::max_sum m = rm::max_sum_empty();
    for (int j = t * W; j < n; j += kStride) {
      const chunk v = chunk::load(z + base + j);
#pragma unroll
      for (int e = 0; e < W; ++e) m = rm::max_sum_push(m, v.v[e]);
    }
    m = gpu::group_reduce<0>(m, rm::max_sum_empty(), rm::max_sum_merger{}, slots);
    const float inverse_sum = 1.f / m.sum;
    for (int j = t * W; j < n; j += kStride) {
      const chunk v = chunk::load(z + base + j);
      chunk q;
#pragma unroll
      for (int e = 0; e < W; ++e) q.v[e] = rm::softmax_probability(v.v[e], m.max, inverse_sum);
      q.store(out + base + j);
    }
  }
}

// The softmax layer's backward: a warp per row (kWarps to a block), the dot
// product reduced in the warp's fixed tree.
template <int kWarps>
__global__ void __launch_bounds__(32 * kWarps) softmax_backward_rows(const float* y, float* g, int rows, int n) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  for (int r = static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / 32; r < rows;
       r += static_cast<int>(gridDim.x) * kWarps) {  // the same r for the whole warp
    const std::size_t base = static_cast<std::size_t>(r) * static_cast<std::size_t>(n);
    float dot = 0.f;
    for (int j = lane; j < n; j += 32) dot += g[base + j] * y[base + j];
    dot = gpu::warp_reduce(dot, rm::plus{});
    for (int j = lane; j < n; j += 32) g[base + j] = rm::softmax_input_gradient(y[base + j], g[base + j], dot);
  }
}

// ---------------------------------------------------------------------------
// Mean: one block, sums in Sum (double) in a fixed order. A template, as
// every kernel in this header, so that it links once however many
// translation units include it.

template <class Sum>
__global__ void __launch_bounds__(1024) mean_kernel(const float* values, int n, float* result) {
  __shared__ Sum slots[gpu::slot_count<0>];
  Sum s = 0;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += 1024) s += values[i];
  s = gpu::group_reduce<0>(s, Sum{0}, rm::plus{}, slots);
  if (threadIdx.x == 0) *result = n > 0 ? static_cast<float>(s / n) : 0.f;
}

inline float row_scale(float gradient_scale, int valid_rows) {
  return valid_rows > 0 ? gradient_scale / static_cast<float>(valid_rows) : 0.f;
}

}  // namespace softmax_detail

namespace softmax_detail {
template <class T>
void launch_logits(const T* logits, const std::int32_t* labels, T* d_logits, float* row_loss, int rows, int classes,
                   int valid_rows, float gradient_scale, cudaStream_t stream, int* bad_labels, int row_stride) {
  namespace gpu = typeflow::row_math::gpu;
  check_loss_rows("sparse_softmax_cross_entropy", rows, classes, valid_rows);
  const int stride = row_stride_for("sparse_softmax_cross_entropy", classes, row_stride);
  if (rows == 0) return;
  const float scale = row_scale(gradient_scale, valid_rows);
  // Vector access wherever the rows are 4-aligned: also a vocabulary like
  // 50257 padded to 50304 (layers/embedding.hpp), whose last chunk in a row
  // reads padding columns, left out of the sums, and writes its first values alone.
  const bool vec = stride % 4 == 0 && gpu::all_aligned16(logits, d_logits);
  gpu::dispatch_row(classes, vec, [&]<int kGroup, bool kVec>() {
    if constexpr (kGroup == 0)
      xent_logits_streamed<kVec, T><<<static_cast<unsigned>(rows), 1024, 0, stream>>>(
          logits, labels, d_logits, row_loss, rows, classes, stride, valid_rows, scale, bad_labels);
    else
      xent_logits_held<kGroup, kVec, T><<<gpu::row_blocks<kGroup>(rows), gpu::block_threads<kGroup>, 0, stream>>>(
          logits, labels, d_logits, row_loss, rows, classes, stride, valid_rows, scale, bad_labels);
    TYPEFLOW_CUDA_CHECK_LAUNCH();
  });
}
}  // namespace softmax_detail

void sparse_softmax_cross_entropy(const float* logits, const std::int32_t* labels, float* d_logits,
                                         float* row_loss, int rows, int classes, int valid_rows, float gradient_scale,
                                         cudaStream_t stream, int* bad_labels, int row_stride) {
  softmax_detail::launch_logits(logits, labels, d_logits, row_loss, rows, classes, valid_rows, gradient_scale, stream,
                                bad_labels, row_stride);
}

void sparse_softmax_cross_entropy(const typeflow::bf16* logits, const std::int32_t* labels, typeflow::bf16* d_logits,
                                  float* row_loss, int rows, int classes, int valid_rows, float gradient_scale,
                                  cudaStream_t stream, int* bad_labels, int row_stride) {
  softmax_detail::launch_logits(logits, labels, d_logits, row_loss, rows, classes, valid_rows, gradient_scale, stream,
                                bad_labels, row_stride);
}

void sparse_crossentropy_from_probabilities(const float* probabilities, const std::int32_t* labels,
                                                   float* d_probabilities, float* row_loss, int rows, int classes,
                                                   int valid_rows, float gradient_scale, cudaStream_t stream,
                                                   int* bad_labels, int row_stride) {
  namespace d = softmax_detail;
  namespace gpu = typeflow::row_math::gpu;
  check_loss_rows("sparse_crossentropy_from_probabilities", rows, classes, valid_rows);
  const int stride = row_stride_for("sparse_crossentropy_from_probabilities", classes, row_stride);
  if (rows == 0) return;
  const float scale = d::row_scale(gradient_scale, valid_rows);
  const bool vec = classes % 4 == 0 && stride % 4 == 0 && gpu::all_aligned16(probabilities, d_probabilities);
  gpu::dispatch_row(classes, vec, [&]<int kGroup, bool kVec>() {
    if constexpr (kGroup == 0)
      d::xent_probabilities_streamed<kVec><<<static_cast<unsigned>(rows), 1024, 0, stream>>>(
          probabilities, labels, d_probabilities, row_loss, rows, classes, stride, valid_rows, scale, bad_labels);
    else
      d::xent_probabilities_held<kGroup, kVec>
          <<<gpu::row_blocks<kGroup>(rows), gpu::block_threads<kGroup>, 0, stream>>>(
              probabilities, labels, d_probabilities, row_loss, rows, classes, stride, valid_rows, scale, bad_labels);
    TYPEFLOW_CUDA_CHECK_LAUNCH();
  });
}

void sparse_categorical_crossentropy(bool from_logits, const float* outputs, const std::int32_t* labels,
                                            float* d_outputs, float* row_loss, int rows, int classes, int valid_rows,
                                            float gradient_scale, cudaStream_t stream, int* bad_labels,
                                            int row_stride) {
  if (from_logits)
    sparse_softmax_cross_entropy(outputs, labels, d_outputs, row_loss, rows, classes, valid_rows, gradient_scale,
                                 stream, bad_labels, row_stride);
  else
    sparse_crossentropy_from_probabilities(outputs, labels, d_outputs, row_loss, rows, classes, valid_rows,
                                           gradient_scale, stream, bad_labels, row_stride);
}

void softmax_forward(const float* z, float* p, int rows, int classes, cudaStream_t stream) {
  namespace d = softmax_detail;
  namespace gpu = typeflow::row_math::gpu;
  check_loss_rows("softmax_forward", rows, classes, 0);
  if (rows == 0) return;
  const bool vec = classes % 4 == 0 && gpu::all_aligned16(z, p);
  gpu::dispatch_row(classes, vec, [&]<int kGroup, bool kVec>() {
    if constexpr (kGroup == 0)
      d::softmax_streamed<kVec><<<static_cast<unsigned>(rows), 1024, 0, stream>>>(z, p, rows, classes);
    else
      d::softmax_held<kGroup, kVec><<<gpu::row_blocks<kGroup>(rows), gpu::block_threads<kGroup>, 0, stream>>>(
          z, p, rows, classes);
    TYPEFLOW_CUDA_CHECK_LAUNCH();
  });
}

void softmax_backward(const float* y, float* gradient, int rows, int classes, cudaStream_t stream) {
  namespace d = softmax_detail;
  check_loss_rows("softmax_backward", rows, classes, 0);
  if (rows == 0) return;
  constexpr int warps = 4;
  d::softmax_backward_rows<warps><<<blocks_for(static_cast<std::size_t>(rows), warps), 32 * warps, 0, stream>>>(
      y, gradient, rows, classes);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

void mean_of(const float* values, int n, float* result_device, cudaStream_t stream) {
  if (n < 0) throw std::invalid_argument("typeflow: mean_of: n must be >= 0, got " + std::to_string(n));
  softmax_detail::mean_kernel<double><<<1, 1024, 0, stream>>>(values, n, result_device);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace typeflow::backend::cuda

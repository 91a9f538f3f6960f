// The kernels of backend/cuda/batch_norm.hpp and its launchers' definitions.
// Compiled once by nvcc into typeflow::cuda's kernel library
// (src/cuda/batch_norm.cu); to build without that library, compile that one
// source into your program instead. Include it nowhere else.
#pragma once
#include "typeflow/backend/cuda/batch_norm.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/core/batch_norm_math.hpp"

namespace typeflow::backend::cuda {

namespace batch_norm_detail {

namespace bm = typeflow::batch_norm_math;
constexpr int threads = 128;  // features per block of the column kernels
using bm::chunking;
using bm::chunking_of;

// Scratch: [sums: chunks x features doubles][second sums: the same][per feature: 2 doubles, 3 floats].
inline std::size_t partial_bytes(int rows, int features) {
  return static_cast<std::size_t>(chunking_of(rows).chunks) * static_cast<std::size_t>(features) * sizeof(double);
}

enum class column_sum { values, squared_deviations, gradients };

// The rows the statistics count: a partial batch's valid ones, read from
// the device's step values (valid_samples null: all of them).
struct live_rows {
  const std::int32_t* valid_samples;
  int rows_per_sample;
  __device__ int of(int rows) const {
    return bm::live_rows_of(valid_samples ? *valid_samples : -1, rows_per_sample, rows);
  }
};

// partial[chunk][j] (and partial2 for gradients): sums over the chunk's live rows.
template <column_sum What>
__global__ void __launch_bounds__(threads)
    chunk_sums(const float* x, const float* dy, const double* mean_d, const float* mean, const float* inverse_std,
               double* partial, double* partial2, int rows, int n, chunking k, live_rows counted) {
  const int j = static_cast<int>(blockIdx.x) * threads + static_cast<int>(threadIdx.x);
  if (j >= n) return;
  const int chunk = static_cast<int>(blockIdx.y);
  const int r0 = chunk * k.rows_per_chunk, r1 = bm::chunk_end(k, chunk, counted.of(rows));
  double s = 0, s2 = 0;
  for (int r = r0; r < r1; ++r) {
    const float v = x[static_cast<std::size_t>(r) * n + j];
    if constexpr (What == column_sum::values) {
      s += v;
    } else if constexpr (What == column_sum::squared_deviations) {
      const double deviation = v - mean_d[j];
      s += deviation * deviation;
    } else {
      const float g = dy[static_cast<std::size_t>(r) * n + j];
      s += g;
      s2 += double{g} * bm::normalized_of(v, mean[j], inverse_std[j]);
    }
  }
  partial[static_cast<std::size_t>(chunk) * n + j] = s;
  if constexpr (What == column_sum::gradients) partial2[static_cast<std::size_t>(chunk) * n + j] = s2;
}

__device__ __forceinline__ double sum_chunks(const double* partial, int chunks, int n, int j) {
  double s = 0;
  for (int c = 0; c < chunks; ++c) s += partial[static_cast<std::size_t>(c) * n + j];
  return s;
}

template <int = 0>
__global__ void finish_mean(const double* partial, double* mean_d, int chunks, int rows, int n, live_rows counted) {
  const int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (j < n) mean_d[j] = sum_chunks(partial, chunks, n, j) / bm::divisor_of(counted.of(rows));
}

template <int = 0>
__global__ void finish_variance(const double* partial, const double* mean_d, float* mean, float* inverse_std,
                                float* moving_mean, float* moving_variance, int chunks, int rows, int n,
                                float momentum, float update_weight, float epsilon, live_rows counted) {
  const int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= n) return;
  const int live = counted.of(rows);
  const double variance = sum_chunks(partial, chunks, n, j) / bm::divisor_of(live);
  mean[j] = static_cast<float>(mean_d[j]);
  inverse_std[j] = bm::inverse_std_of(variance, epsilon);
  if (live == 0) return;  // no sample here: the moving statistics stay
  moving_mean[j] = bm::moving_average_of(moving_mean[j], mean[j], momentum, update_weight);
  moving_variance[j] = bm::moving_average_of(moving_variance[j], static_cast<float>(variance), momentum, update_weight);
}

template <int = 0>
__global__ void normalize(const float* x, float* y, const float* gamma, const float* beta, const float* mean,
                          const float* inverse_std, const float* moving_variance, float epsilon, int n,
                          std::size_t count) {
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const int j = static_cast<int>(e % static_cast<std::size_t>(n));
    // Inference: 1 / std from the moving variance, as the CPU computes it per feature.
    const float s = moving_variance ? bm::inverse_std_of(double{moving_variance[j]}, epsilon) : inverse_std[j];
    y[e] = bm::normalized_output(x[e], mean[j], s, gamma, beta, j);
  }
}

// Per feature: d_gamma, d_beta, and what dx needs (mean_dy, mean_dy_normalized, factor).
template <int = 0>
__global__ void finish_gradients(const double* partial, const double* partial2, const float* gamma,
                                 const float* inverse_std, float* d_gamma, float* d_beta, float* per_feature,
                                 int chunks, int rows, int n, live_rows counted) {
  const int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= n) return;
  const double sum_dy = sum_chunks(partial, chunks, n, j), sum_dy_normalized = sum_chunks(partial2, chunks, n, j);
  const double count = bm::divisor_of(counted.of(rows));
  if (d_gamma) d_gamma[j] = static_cast<float>(sum_dy_normalized);
  if (d_beta) d_beta[j] = static_cast<float>(sum_dy);
  per_feature[j] = static_cast<float>(sum_dy / count);
  per_feature[n + j] = static_cast<float>(sum_dy_normalized / count);
  per_feature[2 * n + j] = (gamma ? gamma[j] : 1.f) * inverse_std[j];
}

// The padding rows of a partial batch get no gradient.
template <int = 0>
__global__ void input_gradients(const float* x, const float* dy, float* dx, const float* mean,
                                const float* inverse_std, const float* per_feature, int n, std::size_t count,
                                int rows, live_rows counted) {
  const std::size_t live_end = static_cast<std::size_t>(counted.of(rows)) * static_cast<std::size_t>(n);
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const int j = static_cast<int>(e % static_cast<std::size_t>(n));
    dx[e] = e < live_end ? bm::normalized_gradient(dy[e], x[e], mean[j], inverse_std[j], per_feature[2 * n + j],
                                                   per_feature[j], per_feature[n + j])
                         : 0.f;
  }
}

inline void check(const char* what, int rows, int features) {
  if (rows < 1 || features < 1)
    throw std::invalid_argument(std::string(what) + ": rows " + std::to_string(rows) + " and features " +
                                std::to_string(features) + " must be positive");
}

inline unsigned feature_blocks(int n) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace batch_norm_detail

std::size_t batch_norm_scratch_bytes(int rows, int features) {
  namespace d = batch_norm_detail;
  d::check("batch_norm_scratch_bytes", rows, features);
  return 2 * d::partial_bytes(rows, features) + static_cast<std::size_t>(features) * (sizeof(double) + 3 * sizeof(float));
}

void batch_norm_forward_training(const float* x, float* y, const float* gamma, const float* beta, float* moving_mean,
                                 float* moving_variance, float* mean, float* inverse_std, int rows, int features,
                                 float momentum, float epsilon, std::byte* scratch, cudaStream_t stream,
                                 const std::int32_t* valid_samples, int rows_per_sample) {
  namespace d = batch_norm_detail;
  d::check("batch_norm_forward_training", rows, features);
  const d::chunking k = d::chunking_of(rows);
  const d::live_rows counted{valid_samples, rows_per_sample};
  auto* partial = reinterpret_cast<double*>(scratch);
  auto* mean_d = reinterpret_cast<double*>(scratch + 2 * d::partial_bytes(rows, features));
  const dim3 grid(d::feature_blocks(features), static_cast<unsigned>(k.chunks));
  d::chunk_sums<d::column_sum::values><<<grid, d::threads, 0, stream>>>(x, nullptr, nullptr, nullptr, nullptr, partial,
                                                                       nullptr, rows, features, k, counted);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
  d::finish_mean<><<<d::feature_blocks(features), d::threads, 0, stream>>>(partial, mean_d, k.chunks, rows, features,
                                                                          counted);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
  d::chunk_sums<d::column_sum::squared_deviations><<<grid, d::threads, 0, stream>>>(
      x, nullptr, mean_d, nullptr, nullptr, partial, nullptr, rows, features, k, counted);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
  const float update_weight = static_cast<float>(1.0 - double{momentum});  // as the CPU rounds it
  d::finish_variance<><<<d::feature_blocks(features), d::threads, 0, stream>>>(
      partial, mean_d, mean, inverse_std, moving_mean, moving_variance, k.chunks, rows, features, momentum,
      update_weight, epsilon, counted);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
  const std::size_t count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(features);
  d::normalize<><<<blocks_for(count, 256), 256, 0, stream>>>(x, y, gamma, beta, mean, inverse_std, nullptr, epsilon,
                                                             features, count);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

void batch_norm_forward_inference(const float* x, float* y, const float* gamma, const float* beta,
                                  const float* moving_mean, const float* moving_variance, int rows, int features,
                                  float epsilon, cudaStream_t stream) {
  namespace d = batch_norm_detail;
  d::check("batch_norm_forward_inference", rows, features);
  const std::size_t count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(features);
  d::normalize<><<<blocks_for(count, 256), 256, 0, stream>>>(x, y, gamma, beta, moving_mean, nullptr, moving_variance,
                                                             epsilon, features, count);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

void batch_norm_backward(const float* x, const float* dy, float* dx, const float* gamma, const float* mean,
                         const float* inverse_std, float* d_gamma, float* d_beta, int rows, int features,
                         std::byte* scratch, cudaStream_t stream, const std::int32_t* valid_samples,
                         int rows_per_sample) {
  namespace d = batch_norm_detail;
  d::check("batch_norm_backward", rows, features);
  const d::chunking k = d::chunking_of(rows);
  const d::live_rows counted{valid_samples, rows_per_sample};
  auto* partial = reinterpret_cast<double*>(scratch);
  auto* partial2 = reinterpret_cast<double*>(scratch + d::partial_bytes(rows, features));
  auto* per_feature = reinterpret_cast<float*>(scratch + 2 * d::partial_bytes(rows, features) +
                                               static_cast<std::size_t>(features) * sizeof(double));
  const dim3 grid(d::feature_blocks(features), static_cast<unsigned>(k.chunks));
  d::chunk_sums<d::column_sum::gradients><<<grid, d::threads, 0, stream>>>(x, dy, nullptr, mean, inverse_std, partial,
                                                                          partial2, rows, features, k, counted);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
  d::finish_gradients<><<<d::feature_blocks(features), d::threads, 0, stream>>>(
      partial, partial2, gamma, inverse_std, d_gamma, d_beta, per_feature, k.chunks, rows, features, counted);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
  if (!dx) return;
  const std::size_t count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(features);
  d::input_gradients<><<<blocks_for(count, 256), 256, 0, stream>>>(x, dy, dx, mean, inverse_std, per_feature, features,
                                                                   count, rows, counted);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace typeflow::backend::cuda

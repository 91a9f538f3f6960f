// batch_normalization on the GPU (layers/batch_norm.hpp), over (rows,
// features) row-major float32 data, through core/batch_norm_math.hpp's
// arithmetic, which the CPU layer runs too:
//
//   batch_norm_forward_training   the batch's mean and biased variance per
//       feature (summed in double: each chunk of rows by one thread, then the
//       chunks in order), mean and 1 / std kept for backward, the moving
//       statistics updated, and y
//   batch_norm_forward_inference  y from the moving statistics
//   batch_norm_backward           d_gamma, d_beta (written; null: not
//       wanted) and dx (null: not wanted; may be dy)
//
// gamma / beta null: scale 1 / offset 0 (Options.scale / center off). The
// sums' order depends on the shape alone: results are bitwise repeatable,
// no atomics. Scratch: batch_norm_scratch_bytes(rows, features) bytes of
// device memory, 8-byte aligned. Everything is enqueued on `stream`
// (graph-capturable). valid_samples (device memory, read when the kernels
// run; null: every sample): a last partial batch's samples present, whose
// rows_per_sample rows each the statistics count (core/batch_norm_math.hpp's
// live_rows_of); the padding rows get no gradient.
#pragma once

// Declared here for any compiler; defined, with their kernels, in
// kernels/batch_norm.cuh, which nvcc compiles once into typeflow::cuda's
// kernel library (src/cuda/batch_norm.cu).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace typeflow::backend::cuda {

std::size_t batch_norm_scratch_bytes(int rows, int features);

void batch_norm_forward_training(const float* x, float* y, const float* gamma, const float* beta, float* moving_mean,
                                 float* moving_variance, float* mean, float* inverse_std, int rows, int features,
                                 float momentum, float epsilon, std::byte* scratch, cudaStream_t stream,
                                 const std::int32_t* valid_samples = nullptr, int rows_per_sample = 1);

void batch_norm_forward_inference(const float* x, float* y, const float* gamma, const float* beta,
                                  const float* moving_mean, const float* moving_variance, int rows, int features,
                                  float epsilon, cudaStream_t stream);

void batch_norm_backward(const float* x, const float* dy, float* dx, const float* gamma, const float* mean,
                         const float* inverse_std, float* d_gamma, float* d_beta, int rows, int features,
                         std::byte* scratch, cudaStream_t stream, const std::int32_t* valid_samples = nullptr,
                         int rows_per_sample = 1);

}  // namespace typeflow::backend::cuda

// The kernels of backend/cuda/regularization.hpp and its launcher's
// definition. Compiled once by nvcc into typeflow::cuda's kernel library
// (src/cuda/regularization.cu); to build without that library, compile that
// one source into your program instead. Include it nowhere else.
#pragma once
#include "typeflow/backend/cuda/regularization.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/regularizers/regularizers.hpp"

namespace typeflow::backend::cuda {

namespace regularization_detail {

constexpr unsigned threads = 256;

// A block's values summed in a fixed tree; the result in thread 0.
__device__ __forceinline__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (unsigned half = threads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  return shared[0];
}

template <int = 0>
__global__ void __launch_bounds__(threads)
    penalties(const float* weights, float* grads, const regularization_entry* table, int count,
              const float* gradient_scale, double* partials) {
  __shared__ double shared[threads];
  const float scale = gradient_scale ? *gradient_scale : 1.f;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * threads + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * threads;
  double sum = 0;
  for (int k = 0; k < count; ++k) {
    const regularization_entry t = table[k];
    for (std::size_t i = first; i < t.size; i += stride) {
      const float w = weights[t.offset + i];
      sum += regularizers::penalty_at(w, t.l1, t.l2);
      grads[t.offset + i] += scale * regularizers::penalty_gradient(w, t.l1, t.l2);
    }
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

template <int = 0>
__global__ void __launch_bounds__(threads) total(const double* partials, int n, float* penalty) {
  __shared__ double shared[threads];
  double sum = 0;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(threads)) sum += partials[i];
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) *penalty = static_cast<float>(sum);
}

}  // namespace regularization_detail

void apply_regularization(const float* weights, float* grads, const regularization_entry* table, int count,
                          const float* gradient_scale, float* penalty, double* partials, cudaStream_t stream) {
  namespace d = regularization_detail;
  if (count < 0) throw std::invalid_argument("apply_regularization: " + std::to_string(count) + " tensors");
  d::penalties<><<<regularization_blocks, d::threads, 0, stream>>>(weights, grads, table, count, gradient_scale,
                                                                  partials);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
  d::total<><<<1, d::threads, 0, stream>>>(partials, static_cast<int>(regularization_blocks), penalty);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace typeflow::backend::cuda

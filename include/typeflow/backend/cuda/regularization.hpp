// Kernel and bias regularizers on the GPU (train/regularization.hpp is the
// CPU's; the per-weight arithmetic is regularizers/regularizers.hpp's
// penalty_gradient and penalty_at, which both run):
//
//   apply_regularization   grads[t] += scale * penalty_gradient(w[t]) over
//                          every tensor of the table, and *penalty = the sum
//                          of penalty_at(w) over them (summed in double)
//
// scale is *gradient_scale when it is not null (the loss scale, read when
// the kernel runs: the gradients are still scaled then), else 1. The sum is
// deterministic: a fixed grid, each thread's partial in a fixed order, then
// fixed-order reductions; no atomics. Everything is enqueued on `stream`
// (graph-capturable); `partials` is regularization_partials_bytes of
// device memory.
#pragma once

// Declared here for any compiler; defined, with their kernels, in
// kernels/regularization.cuh, which nvcc compiles once into typeflow::cuda's
// kernel library (src/cuda/regularization.cu).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace typeflow::backend::cuda {

// One regularized tensor (train/regularization.hpp's regularized_tensor):
// offset and size in floats from the parameter region's start.
struct regularization_entry {
  std::uint64_t offset = 0, size = 0;
  float l1 = 0.f, l2 = 0.f;
};

inline constexpr unsigned regularization_blocks = 264;  // two per H100/H200 SM: a fixed grid, a fixed order
inline constexpr std::size_t regularization_partials_bytes = regularization_blocks * sizeof(double);

void apply_regularization(const float* weights, float* grads, const regularization_entry* table, int count,
                          const float* gradient_scale, float* penalty, double* partials, cudaStream_t stream);

}  // namespace typeflow::backend::cuda

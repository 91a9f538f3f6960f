// sums[j] = Σ_r values[r][j] over a row-major (rows, columns) float32
// matrix: a thread per column adding the rows in order, so the result is the
// same bits on every run (no atomics). For the bias gradients no product's
// epilogue computes (a frozen kernel's layer, depthwise_conv2d). Enqueued on
// `stream`.
#pragma once

// Declared here for any compiler; defined in kernels/column_sums.cuh, which
// nvcc compiles once into typeflow::cuda's kernel library
// (src/cuda/column_sums.cu).

#include <cuda_runtime.h>

#include <cstddef>

namespace typeflow::backend::cuda {

void column_sums(const float* values, float* sums, std::size_t rows, int columns, cudaStream_t stream);

}  // namespace typeflow::backend::cuda

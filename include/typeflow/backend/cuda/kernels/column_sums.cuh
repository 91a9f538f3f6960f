// The kernel of backend/cuda/column_sums.hpp and its launcher's definition.
// Compiled once by nvcc into typeflow::cuda's kernel library
// (src/cuda/column_sums.cu). Include it nowhere else.
#pragma once
#include "typeflow/backend/cuda/column_sums.hpp"

#include <cuda_runtime.h>

#include <cstddef>

#include "typeflow/backend/cuda/runtime.hpp"

namespace typeflow::backend::cuda {

namespace column_sums_detail {

constexpr unsigned threads = 256;

__global__ void column_sums_kernel(const float* values, float* sums, std::size_t rows, int columns) {
  const int j = static_cast<int>(blockIdx.x * threads + threadIdx.x);
  if (j >= columns) return;
  float s = 0.f;
  for (std::size_t r = 0; r < rows; ++r) s += values[r * static_cast<std::size_t>(columns) + j];
  sums[j] = s;
}

}  // namespace column_sums_detail

void column_sums(const float* values, float* sums, std::size_t rows, int columns, cudaStream_t stream) {
  namespace cs = column_sums_detail;
  if (columns <= 0) return;
  const unsigned blocks = (static_cast<unsigned>(columns) + cs::threads - 1) / cs::threads;
  cs::column_sums_kernel<<<blocks, cs::threads, 0, stream>>>(values, sums, rows, columns);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace typeflow::backend::cuda

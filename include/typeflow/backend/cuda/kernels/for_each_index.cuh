// The kernel of backend/cuda/context.hpp's for_each_index. src/cuda/
// for_each_index.cu instantiates it for the merge layers' functors, once, in
// typeflow::cuda's kernel library; a .cu file of your own may include this
// header for functors of its own.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "typeflow/backend/cuda/elementwise.hpp"
#include "typeflow/backend/cuda/runtime.hpp"

namespace typeflow::backend::cuda {

namespace detail {
template <class F>
__global__ void for_each_index_kernel(std::size_t n, F f) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}
}  // namespace detail

template <class F>
void for_each_index(std::size_t n, F f, cudaStream_t stream) {
  if (n == 0) return;
  detail::for_each_index_kernel<<<blocks_for(n, elementwise_threads), elementwise_threads, 0, stream>>>(n, f);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace typeflow::backend::cuda

// Host vectors to device buffers and back, for the CUDA tests that check
// kernels against host results.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include <typeflow/backend/cuda/runtime.hpp>

namespace cuda_test {

template <class T>
typeflow::backend::cuda::device_buffer to_device(const std::vector<T>& host) {
  typeflow::backend::cuda::device_buffer buffer(std::max<std::size_t>(1, host.size()) * sizeof(T));
  if (!host.empty()) typeflow::backend::cuda::copy_to_device(buffer.data(), host.data(), host.size() * sizeof(T));
  return buffer;
}

inline std::vector<float> from_device(const typeflow::backend::cuda::device_buffer& b, std::size_t count) {
  std::vector<float> host(count);
  TYPEFLOW_CUDA_CHECK(cudaMemcpy(host.data(), b.data(), count * sizeof(float), cudaMemcpyDeviceToHost));
  return host;
}

}  // namespace cuda_test

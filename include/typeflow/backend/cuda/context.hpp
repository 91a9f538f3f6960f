// The CUDA backend's context: what every executor of one replica's step
// shares (layer_io<cuda>::context), and the device primitives that the
// device-independent executors (combinators) ask for.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "typeflow/backend/cuda/elementwise.hpp"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/backend/device.hpp"

namespace typeflow::backend::cuda {

// Values that change every step and that a captured graph reads from device
// memory (the host refreshes them before each launch).
struct step_values {
  std::uint64_t step = 0;  // the training step, as run_state::step on the CPU (dropout's counter)
  // The replica's samples present in a last partial batch, as
  // run_state::valid_samples on the CPU (batch_norm's statistics); -1: all.
  std::int32_t valid_samples = -1;
};
// Where step_values::valid_samples lies in the device's copy.
inline const std::int32_t* valid_samples_on_device(const step_values* on_device) {
  return reinterpret_cast<const std::int32_t*>(reinterpret_cast<const std::byte*>(on_device) +
                                               offsetof(step_values, valid_samples));
}

struct context {
  cudaStream_t stream = nullptr;          // where every executor enqueues
  cublasLtHandle_t lt = nullptr;
  std::byte* gemm_workspace = nullptr;    // cuBLASLt's, shared by the products
  std::size_t gemm_workspace_bytes = 0;
  const step_values* step = nullptr;      // device memory
};

// Sub-buffers of an executor's scratch start 256 bytes apart (cuBLASLt's
// operands, float4 / uint4 element-wise access).
constexpr std::size_t scratch_align(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

// A step program's scratchpad: one cudaMalloc block (none for 0 bytes).
class scratchpad {
 public:
  explicit scratchpad(std::size_t bytes) : buffer_(bytes) {}
  std::byte* data() const noexcept { return buffer_.data(); }

 private:
  device_buffer buffer_;
};

// f(i) for i in [0, n) on `stream`: one grid-stride kernel, compiled in the
// kernel library for each of layers/merge_functors.hpp's functors
// (src/cuda/for_each_index.cu; kernels/for_each_index.cuh for others).
template <class F>
void for_each_index(std::size_t n, F f, cudaStream_t stream);

inline void copy_bytes(context& c, void* to, const void* from, std::size_t bytes) {
  TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, c.stream));
}
// to[i] += from[i]
inline void add_in_place(context& c, float* to, const float* from, std::size_t count) {
  map2(to, from, to, count, add_fn{}, c.stream);
}
// f(i) for i in [0, n): an element functor written once for both devices
// (TYPEFLOW_HOST_DEVICE; the merge layers' executors use it).
template <class F>
inline void for_each_index(context& c, std::size_t n, F f) {
  for_each_index(n, f, c.stream);
}

}  // namespace typeflow::backend::cuda

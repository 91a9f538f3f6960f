// Devices a model runs on, the model's fourth parameter:
//   cpu:  oneDNN and OpenMP (the default);
//   cuda: one NVIDIA GPU, cuBLASLt and typeflow's kernels, the whole training
//         step replayed as one CUDA graph (typeflow/cuda.hpp, nvcc only).
//
// A device names its backend's context, the one object every executor of a
// step shares (layer_io<Device>::context), and the scratchpad memory a step
// program gives its executors (constructed from a byte count, data() is its
// first byte). Only the declarations are here, so that the engine (model/,
// train/) names devices without including a backend:
// backend/cpu/context.hpp and backend/cuda/context.hpp define them.
#pragma once

namespace typeflow {

namespace backend::cpu {
struct context;
class scratchpad;
}  // namespace backend::cpu
namespace backend::cuda {
struct context;
class scratchpad;
}  // namespace backend::cuda

struct cpu {
  static constexpr const char* name = "cpu";
  static constexpr bool gpu = false;  // how model<> binds the network (contract/layer.hpp's layer_context)
  using context = backend::cpu::context;
  using scratchpad = backend::cpu::scratchpad;  // host memory, 64-byte aligned
};

struct cuda {
  static constexpr const char* name = "cuda";
  static constexpr bool gpu = true;
  using context = backend::cuda::context;
  using scratchpad = backend::cuda::scratchpad;  // cudaMalloc'd
};

}  // namespace typeflow

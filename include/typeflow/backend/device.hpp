// Devices a model runs on, the model's fourth parameter:
//   cpu:  oneDNN and OpenMP (the default);
//   cuda: one NVIDIA GPU, cuBLASLt and typeflow's kernels, the whole training
//         step replayed as one CUDA graph (typeflow/cuda.cuh, nvcc only).
#pragma once

namespace typeflow {

struct cpu {
  static constexpr const char* name = "cpu";
};

struct cuda {
  static constexpr const char* name = "cuda";
};

}  // namespace typeflow

// typeflow on NVIDIA GPUs: everything in typeflow.hpp, plus
// model<Net, Policy, Strategy, cuda> (train/cuda_engine.cuh). Include it from a .cu file compiled
// by nvcc (C++20) and link typeflow::cuda (cudart, cuBLASLt, NCCL).
#pragma once

#if !defined(__CUDACC__)
#error "typeflow/cuda.cuh: compile this translation unit with nvcc (a .cu file linked to typeflow::cuda)"
#endif

#include "typeflow/typeflow.hpp"
#include "typeflow/train/cuda_engine.cuh"

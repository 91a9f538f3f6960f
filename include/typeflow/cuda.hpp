// typeflow on NVIDIA GPUs: everything in typeflow.hpp, plus
// model<Net, Policy, Strategy, cuda> (train/cuda_engine.hpp). Ordinary C++:
// include it from any translation unit, compiled by g++, clang or nvcc
// (C++20), and link typeflow::cuda (the kernel library typeflow_cuda_kernels,
// cudart, cuBLASLt, NCCL). The model's types, its executors and the engine
// are host code over the library's launchers; the kernels are compiled once,
// when the library is built.
#pragma once

#include "typeflow/typeflow.hpp"
#include "typeflow/train/cuda_engine.hpp"

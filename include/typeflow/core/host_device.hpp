// TYPEFLOW_HOST_DEVICE marks the element functors that both backends run:
// plain inline functions for g++, __host__ __device__ under nvcc, so the CPU
// tests check the very arithmetic that the GPU kernels execute.
#pragma once

#if defined(__CUDACC__)
#define TYPEFLOW_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TYPEFLOW_HOST_DEVICE inline
#endif

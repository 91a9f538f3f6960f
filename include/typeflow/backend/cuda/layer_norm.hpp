// layer_norm over the last axis on the GPU: layers/layer_norm.hpp's
// arithmetic (through core/row_math.hpp), on (rows, features) row-major
// float32 data.
//
//   layer_norm_forward   y = gamma * (x - mean) * rstd + beta, per row;
//                        mean[row] and rstd[row] = 1 / sqrt(var + epsilon)
//                        (biased variance) kept for backward.
//   layer_norm_backward  dx = rstd * (g - mean(g) - x̂ * mean(g * x̂)), g = dy * gamma;
//                        dgamma = Σ_rows dy * x̂, dbeta = Σ_rows dy, written
//                        (not accumulated), as the CPU layer does.
//
// Null pointers: gamma (scale 1), beta (offset 0), mean / rstd in forward
// (not kept), dx (no input gradient), dgamma / dbeta (not wanted).
// Aliasing: y may be x, and dx may be dy (the CPU layer's in-place gradient):
// every element is read by the thread that later writes it, and dgamma/dbeta
// are taken from dy before dx is written. No other overlap is allowed.
// Workspace: backward needs layer_norm_backward_workspace_bytes(rows, features)
// bytes of device memory (4-byte aligned; contents ignored, then clobbered), a
// function of the shape alone. dgamma / dbeta are two-stage column sums
// through it, in a fixed order: results are bitwise repeatable, no atomics.
//
// Rows up to 8192 features are held in registers by a group of 32..1024
// threads (one warp per row up to 256 features); wider rows are streamed
// (read twice). float4 access when features % 4 == 0 and every row pointer
// is 16-byte aligned. Everything is enqueued on `stream`; nothing allocates
// or waits, so the calls can be captured in a CUDA graph.
#pragma once

// Declared here for any compiler; defined, with their kernels, in
// kernels/layer_norm.cuh, which nvcc compiles once into typeflow::cuda's
// kernel library (src/cuda/layer_norm.cu).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace typeflow::backend::cuda {

// Bytes of device workspace layer_norm_backward needs for this shape (0 when
// rows is 0).
std::size_t layer_norm_backward_workspace_bytes(int rows, int features);

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        int rows, int features, float epsilon, cudaStream_t stream);

// mean and rstd: forward's. partial_workspace: layer_norm_backward_workspace_bytes(rows, features)
// bytes (may be null when that is 0, or when dgamma and dbeta are both null).
void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                         float* dx, float* dgamma, float* dbeta, int rows, int features, cudaStream_t stream,
                         float* partial_workspace);

}  // namespace typeflow::backend::cuda

// 2-D pooling on the GPU (layers/pooling.hpp): a thread per output element
// forward, a thread per input element backward (each input gathers from the
// windows that cover it: every d_in element written once, no atomics),
// through core/pool_windows.hpp's per-element functions, which the CPU
// layers' window loops match to the bit (tests/unit/pooling_test.cpp
// replays these threads against them).
//
//   max_pool_forward        y, and with `argmax` (training) each output's
//                           position in its window, as index_bytes-wide
//                           unsigned integers (1, 2, or 4: int32)
//   max_pool_backward       dx from dy and forward's argmax
//   average_pool_forward / average_pool_backward
//   global_average_pool_forward / global_average_pool_backward
//                           (batch, pixels, channels) -> (batch, channels)
//   zero_pad_forward / zero_pad_backward   zero_padding2d: (H, W, C) inside
//                           (H + 2 pad_h, W + 2 pad_w, C) zeros, and the
//                           gradient's interior back (plain copies)
//
// Everything is enqueued on `stream` (graph-capturable), float32 data.
#pragma once

// Declared here for any compiler; defined, with their kernels, in
// kernels/pooling.cuh, which nvcc compiles once into typeflow::cuda's kernel
// library (src/cuda/pooling.cu).

#include <cuda_runtime.h>

#include <cstddef>

#include "typeflow/core/pool_windows.hpp"

namespace typeflow::backend::cuda {

void max_pool_forward(const float* x, float* y, void* argmax, int index_bytes, const pool_windows::window_2d& w,
                      int batch, cudaStream_t stream);
void max_pool_backward(const float* dy, const void* argmax, int index_bytes, float* dx,
                       const pool_windows::window_2d& w, int batch, cudaStream_t stream);
void average_pool_forward(const float* x, float* y, const pool_windows::window_2d& w, int batch, cudaStream_t stream);
void average_pool_backward(const float* dy, float* dx, const pool_windows::window_2d& w, int batch,
                           cudaStream_t stream);
void global_average_pool_forward(const float* x, float* y, int batch, int pixels, int channels, cudaStream_t stream);
void global_average_pool_backward(const float* dy, float* dx, int batch, int pixels, int channels,
                                  cudaStream_t stream);

// The sizes of one sample: (in_h, in_w, channels) and the padding on each side.
struct zero_padding {
  int in_h, in_w, channels, pad_h, pad_w;
};
void zero_pad_forward(const float* x, float* y, const zero_padding& p, int batch, cudaStream_t stream);
void zero_pad_backward(const float* dy, float* dx, const zero_padding& p, int batch, cudaStream_t stream);

}  // namespace typeflow::backend::cuda

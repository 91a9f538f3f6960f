// conv2d and depthwise_conv2d on the GPU (layers/conv2d.hpp), through
// core/conv_windows.hpp's per-element arithmetic, over channels-last float32
// samples:
//
//   conv_patches          the patch matrix (batch out_h out_w, kh kw C) of
//                         x, in float32 or the 16-bit type the product reads
//                         (conv2d's products are cuBLASLt's: backend/cuda/
//                         conv2d_executor.hpp)
//   conv_patch_gradient   d_x from d_patches: each input element gathers
//                         the entries that read it
//   depthwise_forward     y (+ bias) a thread per output element
//   depthwise_backward    d_kernel, d_bias (null: none) and d_x (null: not
//                         wanted), a thread per element of each
//
// Every element is written once, in an order fixed by the shape: no atomics,
// and the same bits from run to run. Everything is enqueued on `stream`
// (graph-capturable).
#pragma once

// Declared here for any compiler; defined, with their kernels, in
// kernels/convolution.cuh, which nvcc compiles once into typeflow::cuda's
// kernel library (src/cuda/convolution.cu).

#include <cuda_runtime.h>

#include "typeflow/core/conv_windows.hpp"
#include "typeflow/core/half.hpp"

namespace typeflow::backend::cuda {

void conv_patches(const float* x, float* patches, const conv_windows::conv_window& w, int batch, cudaStream_t stream);
void conv_patches(const float* x, typeflow::f16* patches, const conv_windows::conv_window& w, int batch,
                  cudaStream_t stream);
void conv_patches(const float* x, typeflow::bf16* patches, const conv_windows::conv_window& w, int batch,
                  cudaStream_t stream);
void conv_patch_gradient(const float* d_patches, float* dx, const conv_windows::conv_window& w, int batch,
                         cudaStream_t stream);

// kernel: (kh, kw, C, M), rows of M kernel_stride floats apart.
void depthwise_forward(const float* x, const float* kernel, int kernel_stride, int multiplier, const float* bias,
                       float* y, const conv_windows::conv_window& w, int batch, cudaStream_t stream);
void depthwise_backward(const float* x, const float* dy, const float* kernel, int kernel_stride, int multiplier,
                        float* dx, float* d_kernel, float* d_bias, const conv_windows::conv_window& w, int batch,
                        cudaStream_t stream);

}  // namespace typeflow::backend::cuda

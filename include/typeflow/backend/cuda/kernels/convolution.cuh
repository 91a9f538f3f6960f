// The kernels of backend/cuda/convolution.hpp and its launchers'
// definitions. Compiled once by nvcc into typeflow::cuda's kernel library
// (src/cuda/convolution.cu); to build without that library, compile that one
// source into your program instead. Include it nowhere else.
#pragma once
#include "typeflow/backend/cuda/convolution.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "typeflow/backend/cuda/column_sums.hpp"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/core/conv_windows.hpp"
#include "typeflow/core/half.hpp"

namespace typeflow::backend::cuda {

namespace convolution_detail {

namespace cw = typeflow::conv_windows;
constexpr unsigned threads = 256;

#define TYPEFLOW_CONV_GRID_STRIDE(e, n)                                                                      \
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < (n); \
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x)

inline unsigned blocks_for(std::size_t n) {
  const std::size_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8);
}

// Element e of a row-major (rows, columns) matrix: its row and column.
struct at2 {
  std::size_t row;
  int column;
};
__device__ __forceinline__ at2 split(std::size_t e, int columns) {
  return {e / static_cast<std::size_t>(columns), static_cast<int>(e % static_cast<std::size_t>(columns))};
}

// patches[(n, oh, ow)][(kh, kw, c)].
template <class T>
__global__ void patches_kernel(const float* x, T* patches, cw::conv_window w, std::size_t n) {
  const int p = w.patch_size();
  TYPEFLOW_CONV_GRID_STRIDE(e, n) {
    const at2 a = split(e, p);
    const std::size_t positions = w.out_positions();
    const std::size_t sample = a.row / positions, position = a.row % positions;
    const int oh = static_cast<int>(position / static_cast<std::size_t>(w.out_w));
    const int ow = static_cast<int>(position % static_cast<std::size_t>(w.out_w));
    const int c = a.column % w.channels, tap = a.column / w.channels;
    const float v = cw::patch_value(x + sample * w.in_size(), w, oh, ow, tap / w.kernel_w, tap % w.kernel_w, c);
    if constexpr (sizeof(T) == 4) patches[e] = v;
    else patches[e] = T(v);
  }
}

// dx[(n, h, x, c)].
__global__ void patch_gradient_kernel(const float* d_patches, float* dx, cw::conv_window w, std::size_t n) {
  TYPEFLOW_CONV_GRID_STRIDE(e, n) {
    const std::size_t sample = e / w.in_size(), inside = e % w.in_size();
    const int c = static_cast<int>(inside % static_cast<std::size_t>(w.channels));
    const std::size_t pixel = inside / static_cast<std::size_t>(w.channels);
    const int h = static_cast<int>(pixel / static_cast<std::size_t>(w.in_w));
    const int col = static_cast<int>(pixel % static_cast<std::size_t>(w.in_w));
    const std::size_t p = static_cast<std::size_t>(w.patch_size());
    dx[e] = cw::patch_gradient(d_patches + sample * w.out_positions() * p, p, w, h, col, c);
  }
}

// y[(n, oh, ow)][c M + m].
__global__ void depthwise_forward_kernel(const float* x, const float* kernel, int kernel_stride, int multiplier,
                                         const float* bias, float* y, cw::conv_window w, std::size_t n) {
  const int out_channels = w.channels * multiplier;
  TYPEFLOW_CONV_GRID_STRIDE(e, n) {
    const at2 a = split(e, out_channels);
    const std::size_t sample = a.row / w.out_positions(), position = a.row % w.out_positions();
    const int oh = static_cast<int>(position / static_cast<std::size_t>(w.out_w));
    const int ow = static_cast<int>(position % static_cast<std::size_t>(w.out_w));
    const float s = cw::depthwise_output(x + sample * w.in_size(), kernel, kernel_stride, w, oh, ow,
                                         a.column / multiplier, a.column % multiplier);
    y[e] = bias ? s + bias[a.column] : s;
  }
}

__global__ void depthwise_input_gradient_kernel(const float* dy, const float* kernel, int kernel_stride,
                                                int multiplier, float* dx, cw::conv_window w, std::size_t n) {
  TYPEFLOW_CONV_GRID_STRIDE(e, n) {
    const std::size_t sample = e / w.in_size(), inside = e % w.in_size();
    const int c = static_cast<int>(inside % static_cast<std::size_t>(w.channels));
    const std::size_t pixel = inside / static_cast<std::size_t>(w.channels);
    dx[e] = cw::depthwise_input_gradient(dy + sample * w.out_positions() * w.channels * multiplier, kernel,
                                         kernel_stride, multiplier, w,
                                         static_cast<int>(pixel / static_cast<std::size_t>(w.in_w)),
                                         static_cast<int>(pixel % static_cast<std::size_t>(w.in_w)), c);
  }
}

// d_kernel[(kh, kw, c)][m], rows kernel_stride apart (the padding untouched).
__global__ void depthwise_kernel_gradient_kernel(const float* x, const float* dy, int batch, int multiplier,
                                                 int kernel_stride, float* d_kernel, cw::conv_window w,
                                                 std::size_t n) {
  TYPEFLOW_CONV_GRID_STRIDE(e, n) {
    const at2 a = split(e, multiplier);  // row: (kh, kw, c)
    const int c = static_cast<int>(a.row % static_cast<std::size_t>(w.channels));
    const int tap = static_cast<int>(a.row / static_cast<std::size_t>(w.channels));
    d_kernel[a.row * static_cast<std::size_t>(kernel_stride) + a.column] =
        cw::depthwise_kernel_gradient(x, dy, batch, multiplier, w, tap / w.kernel_w, tap % w.kernel_w, c, a.column);
  }
}

template <class T>
void patches(const float* x, T* out, const cw::conv_window& w, int batch, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(batch) * w.out_positions() * static_cast<std::size_t>(w.patch_size());
  patches_kernel<T><<<blocks_for(n), threads, 0, stream>>>(x, out, w, n);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

}  // namespace convolution_detail

void conv_patches(const float* x, float* patches, const conv_windows::conv_window& w, int batch, cudaStream_t stream) {
  convolution_detail::patches(x, patches, w, batch, stream);
}
void conv_patches(const float* x, typeflow::f16* patches, const conv_windows::conv_window& w, int batch,
                  cudaStream_t stream) {
  convolution_detail::patches(x, patches, w, batch, stream);
}
void conv_patches(const float* x, typeflow::bf16* patches, const conv_windows::conv_window& w, int batch,
                  cudaStream_t stream) {
  convolution_detail::patches(x, patches, w, batch, stream);
}

void conv_patch_gradient(const float* d_patches, float* dx, const conv_windows::conv_window& w, int batch,
                         cudaStream_t stream) {
  namespace cd = convolution_detail;
  const std::size_t n = static_cast<std::size_t>(batch) * w.in_size();
  cd::patch_gradient_kernel<<<cd::blocks_for(n), cd::threads, 0, stream>>>(d_patches, dx, w, n);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

void depthwise_forward(const float* x, const float* kernel, int kernel_stride, int multiplier, const float* bias,
                       float* y, const conv_windows::conv_window& w, int batch, cudaStream_t stream) {
  namespace cd = convolution_detail;
  const std::size_t n = static_cast<std::size_t>(batch) * w.out_positions() * w.channels * multiplier;
  cd::depthwise_forward_kernel<<<cd::blocks_for(n), cd::threads, 0, stream>>>(x, kernel, kernel_stride, multiplier,
                                                                               bias, y, w, n);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
}

void depthwise_backward(const float* x, const float* dy, const float* kernel, int kernel_stride, int multiplier,
                        float* dx, float* d_kernel, float* d_bias, const conv_windows::conv_window& w, int batch,
                        cudaStream_t stream) {
  namespace cd = convolution_detail;
  const int out_channels = w.channels * multiplier;
  const std::size_t taps = static_cast<std::size_t>(w.kernel_h) * w.kernel_w * w.channels * multiplier;
  cd::depthwise_kernel_gradient_kernel<<<cd::blocks_for(taps), cd::threads, 0, stream>>>(
      x, dy, batch, multiplier, kernel_stride, d_kernel, w, taps);
  TYPEFLOW_CUDA_CHECK(cudaGetLastError());
  if (d_bias) column_sums(dy, d_bias, static_cast<std::size_t>(batch) * w.out_positions(), out_channels, stream);
  if (dx) {
    const std::size_t n = static_cast<std::size_t>(batch) * w.in_size();
    cd::depthwise_input_gradient_kernel<<<cd::blocks_for(n), cd::threads, 0, stream>>>(dy, kernel, kernel_stride,
                                                                                        multiplier, dx, w, n);
    TYPEFLOW_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace typeflow::backend::cuda

// The kernels of backend/cuda/pooling.hpp and its launchers' definitions.
// Compiled once by nvcc into typeflow::cuda's kernel library
// (src/cuda/pooling.cu); to build without that library, compile that one
// source into your program instead. Include it nowhere else.
#pragma once
#include "typeflow/backend/cuda/pooling.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "typeflow/backend/cuda/runtime.hpp"

namespace typeflow::backend::cuda {

namespace pooling_detail {

namespace pw = typeflow::pool_windows;
constexpr unsigned threads = 256;

// Element e of (batch, rows, cols, channels), c fastest: its coordinates.
struct element {
  int n, row, col, c;
};
__device__ __forceinline__ element element_of(std::size_t e, int rows, int cols, int channels) {
  const int c = static_cast<int>(e % static_cast<std::size_t>(channels));
  std::size_t rest = e / static_cast<std::size_t>(channels);
  const int col = static_cast<int>(rest % static_cast<std::size_t>(cols));
  rest /= static_cast<std::size_t>(cols);
  return {static_cast<int>(rest / static_cast<std::size_t>(rows)), static_cast<int>(rest % static_cast<std::size_t>(rows)),
          col, c};
}

#define TYPEFLOW_GRID_STRIDE(e, n)                                                                           \
  for (std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < (n); \
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x)

template <class Index>
__global__ void max_forward(const float* x, float* y, Index* arg, pw::window_2d w, std::size_t n) {
  TYPEFLOW_GRID_STRIDE(e, n) {
    const element at = element_of(e, w.out_h, w.out_w, w.channels);
    y[e] = pw::max_of_window(x + at.n * w.in_size(), w, at.row, at.col, at.c, arg ? arg + e : static_cast<Index*>(nullptr));
  }
}

template <class Index>
__global__ void max_backward(const float* dy, const Index* arg, float* dx, pw::window_2d w, std::size_t n) {
  TYPEFLOW_GRID_STRIDE(e, n) {
    const element at = element_of(e, w.in_h, w.in_w, w.channels);
    const std::size_t sample = static_cast<std::size_t>(at.n) * w.out_size();
    dx[e] = pw::max_window_gradient(dy + sample, arg + sample, w, at.row, at.col, at.c);
  }
}

template <int = 0>
__global__ void average_forward(const float* x, float* y, pw::window_2d w, std::size_t n) {
  TYPEFLOW_GRID_STRIDE(e, n) {
    const element at = element_of(e, w.out_h, w.out_w, w.channels);
    y[e] = pw::average_of_window(x + at.n * w.in_size(), w, at.row, at.col, at.c);
  }
}

template <int = 0>
__global__ void average_backward(const float* dy, float* dx, pw::window_2d w, std::size_t n) {
  TYPEFLOW_GRID_STRIDE(e, n) {
    const element at = element_of(e, w.in_h, w.in_w, w.channels);
    dx[e] = pw::average_window_gradient(dy + static_cast<std::size_t>(at.n) * w.out_size(), w, at.row, at.col, at.c);
  }
}

// As the CPU layer: the sum over the pixels in order, times 1 / pixels.
template <int = 0>
__global__ void global_forward(const float* x, float* y, int pixels, int channels, std::size_t n) {
  const float scale = 1.f / static_cast<float>(pixels);
  TYPEFLOW_GRID_STRIDE(e, n) {
    const std::size_t sample = e / static_cast<std::size_t>(channels), c = e % static_cast<std::size_t>(channels);
    const float* p = x + sample * static_cast<std::size_t>(pixels) * channels + c;
    float sum = 0.f;
    for (int i = 0; i < pixels; ++i) sum += p[static_cast<std::size_t>(i) * channels];
    y[e] = sum * scale;
  }
}

template <int = 0>
__global__ void global_backward(const float* dy, float* dx, int pixels, int channels, std::size_t n) {
  const float scale = 1.f / static_cast<float>(pixels);
  TYPEFLOW_GRID_STRIDE(e, n) {
    const std::size_t c = e % static_cast<std::size_t>(channels);
    const std::size_t sample = e / (static_cast<std::size_t>(pixels) * channels);
    dx[e] = dy[sample * channels + c] * scale;
  }
}

template <int = 0>
__global__ void pad(const float* x, float* y, zero_padding p, std::size_t n) {
  const int out_h = p.in_h + 2 * p.pad_h, out_w = p.in_w + 2 * p.pad_w;
  TYPEFLOW_GRID_STRIDE(e, n) {
    const element at = element_of(e, out_h, out_w, p.channels);
    const int h = at.row - p.pad_h, w = at.col - p.pad_w;
    y[e] = h >= 0 && h < p.in_h && w >= 0 && w < p.in_w
               ? x[((static_cast<std::size_t>(at.n) * p.in_h + h) * p.in_w + w) * p.channels + at.c]
               : 0.f;
  }
}

template <int = 0>
__global__ void crop(const float* dy, float* dx, zero_padding p, std::size_t n) {
  const int out_h = p.in_h + 2 * p.pad_h, out_w = p.in_w + 2 * p.pad_w;
  TYPEFLOW_GRID_STRIDE(e, n) {
    const element at = element_of(e, p.in_h, p.in_w, p.channels);
    dx[e] = dy[((static_cast<std::size_t>(at.n) * out_h + at.row + p.pad_h) * out_w + at.col + p.pad_w) * p.channels +
               at.c];
  }
}

#undef TYPEFLOW_GRID_STRIDE

inline void check(const char* what, int batch, int index_bytes) {
  if (batch < 0) throw std::invalid_argument(std::string(what) + ": batch " + std::to_string(batch) + " < 0");
  if (index_bytes != 1 && index_bytes != 2 && index_bytes != 4)
    throw std::invalid_argument(std::string(what) + ": the argmax is 1, 2 or 4 bytes an element, not " +
                                std::to_string(index_bytes));
}

// f(Index{}) for the argmax's element type.
template <class F>
void with_index(int index_bytes, F&& f) {
  if (index_bytes == 1)
    f(std::uint8_t{});
  else if (index_bytes == 2)
    f(std::uint16_t{});
  else
    f(std::int32_t{});
}

}  // namespace pooling_detail

void max_pool_forward(const float* x, float* y, void* argmax, int index_bytes, const pool_windows::window_2d& w,
                      int batch, cudaStream_t stream) {
  namespace d = pooling_detail;
  d::check("max_pool_forward", batch, index_bytes);
  const std::size_t n = static_cast<std::size_t>(batch) * w.out_size();
  if (n == 0) return;
  d::with_index(index_bytes, [&](auto index) {
    using Index = decltype(index);
    d::max_forward<Index><<<blocks_for(n, d::threads), d::threads, 0, stream>>>(x, y, static_cast<Index*>(argmax), w, n);
  });
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

void max_pool_backward(const float* dy, const void* argmax, int index_bytes, float* dx,
                       const pool_windows::window_2d& w, int batch, cudaStream_t stream) {
  namespace d = pooling_detail;
  d::check("max_pool_backward", batch, index_bytes);
  const std::size_t n = static_cast<std::size_t>(batch) * w.in_size();
  if (n == 0) return;
  d::with_index(index_bytes, [&](auto index) {
    using Index = decltype(index);
    d::max_backward<Index><<<blocks_for(n, d::threads), d::threads, 0, stream>>>(
        dy, static_cast<const Index*>(argmax), dx, w, n);
  });
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

void average_pool_forward(const float* x, float* y, const pool_windows::window_2d& w, int batch, cudaStream_t stream) {
  namespace d = pooling_detail;
  d::check("average_pool_forward", batch, 4);
  const std::size_t n = static_cast<std::size_t>(batch) * w.out_size();
  if (n == 0) return;
  d::average_forward<><<<blocks_for(n, d::threads), d::threads, 0, stream>>>(x, y, w, n);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

void average_pool_backward(const float* dy, float* dx, const pool_windows::window_2d& w, int batch,
                           cudaStream_t stream) {
  namespace d = pooling_detail;
  d::check("average_pool_backward", batch, 4);
  const std::size_t n = static_cast<std::size_t>(batch) * w.in_size();
  if (n == 0) return;
  d::average_backward<><<<blocks_for(n, d::threads), d::threads, 0, stream>>>(dy, dx, w, n);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

void global_average_pool_forward(const float* x, float* y, int batch, int pixels, int channels, cudaStream_t stream) {
  namespace d = pooling_detail;
  d::check("global_average_pool_forward", batch, 4);
  const std::size_t n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(channels);
  if (n == 0 || pixels <= 0) return;
  d::global_forward<><<<blocks_for(n, d::threads), d::threads, 0, stream>>>(x, y, pixels, channels, n);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

void global_average_pool_backward(const float* dy, float* dx, int batch, int pixels, int channels,
                                  cudaStream_t stream) {
  namespace d = pooling_detail;
  d::check("global_average_pool_backward", batch, 4);
  const std::size_t n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(pixels) * channels;
  if (n == 0) return;
  d::global_backward<><<<blocks_for(n, d::threads), d::threads, 0, stream>>>(dy, dx, pixels, channels, n);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

void zero_pad_forward(const float* x, float* y, const zero_padding& p, int batch, cudaStream_t stream) {
  namespace d = pooling_detail;
  d::check("zero_pad_forward", batch, 4);
  const std::size_t n = static_cast<std::size_t>(batch) * (p.in_h + 2 * p.pad_h) * (p.in_w + 2 * p.pad_w) * p.channels;
  if (n == 0) return;
  d::pad<><<<blocks_for(n, d::threads), d::threads, 0, stream>>>(x, y, p, n);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

void zero_pad_backward(const float* dy, float* dx, const zero_padding& p, int batch, cudaStream_t stream) {
  namespace d = pooling_detail;
  d::check("zero_pad_backward", batch, 4);
  const std::size_t n = static_cast<std::size_t>(batch) * p.in_h * p.in_w * p.channels;
  if (n == 0) return;
  d::crop<><<<blocks_for(n, d::threads), d::threads, 0, stream>>>(dy, dx, p, n);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace typeflow::backend::cuda

// 2-D convolution windows over channels-last samples (H, W, C), and the
// per-element arithmetic the GPU's convolutions run (backend/cuda/kernels/
// convolution.cuh; tests/unit/conv_rows_test.cpp replays it against the CPU
// layers, which run oneDNN). layers/conv2d.hpp has Keras's rules for the
// numbers (output lengths, the split of the padding).
//
// conv2d is a product over patches: row (n, oh, ow) of the patch matrix
// holds the kh x kw x C input elements its window reads, in the kernel's
// (kh, kw, c) order and 0 in the padding, so that
//   y (rows, F) = patches (rows, kh kw C) · kernel (kh kw C, F)
// with the kernel as Keras stores it, and backward's d_patches = d_y ·
// kernelᵀ goes back to d_x by patch_gradient: each input element gathers
// the d_patches entries that read it (no atomics).
//
// depthwise_conv2d (channel c * M + m from input channel c and
// kernel[:, :, c, m]) runs a thread per element: depthwise_output,
// depthwise_input_gradient and depthwise_kernel_gradient.
#pragma once

#include <cstddef>

#include "typeflow/core/host_device.hpp"

namespace typeflow::conv_windows {

struct conv_window {
  int in_h, in_w, channels;
  int kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w;
  int top, left;  // padding before the first row and column
  int out_h, out_w;

  // The input row (column) that output row oh (column ow) reads at tap kh
  // (kw); outside [0, in_h) ([0, in_w)) in the padding.
  TYPEFLOW_HOST_DEVICE constexpr int row_at(int oh, int kh) const { return oh * stride_h - top + kh * dilation_h; }
  TYPEFLOW_HOST_DEVICE constexpr int col_at(int ow, int kw) const { return ow * stride_w - left + kw * dilation_w; }
  // The output row (column) whose tap kh (kw) reads input row h (column x), or -1.
  TYPEFLOW_HOST_DEVICE constexpr int output_row(int h, int kh) const {
    const int p = h + top - kh * dilation_h;
    return p >= 0 && p % stride_h == 0 && p / stride_h < out_h ? p / stride_h : -1;
  }
  TYPEFLOW_HOST_DEVICE constexpr int output_col(int x, int kw) const {
    const int p = x + left - kw * dilation_w;
    return p >= 0 && p % stride_w == 0 && p / stride_w < out_w ? p / stride_w : -1;
  }
  TYPEFLOW_HOST_DEVICE constexpr int patch_size() const { return kernel_h * kernel_w * channels; }
  TYPEFLOW_HOST_DEVICE constexpr std::size_t in_size() const {
    return static_cast<std::size_t>(in_h) * static_cast<std::size_t>(in_w) * static_cast<std::size_t>(channels);
  }
  TYPEFLOW_HOST_DEVICE constexpr std::size_t out_positions() const {
    return static_cast<std::size_t>(out_h) * static_cast<std::size_t>(out_w);
  }
};

// Element (kh, kw, c) of output position (oh, ow)'s patch; x: one sample.
TYPEFLOW_HOST_DEVICE float patch_value(const float* x, const conv_window& w, int oh, int ow, int kh, int kw, int c) {
  const int h = w.row_at(oh, kh), col = w.col_at(ow, kw);
  if (h < 0 || h >= w.in_h || col < 0 || col >= w.in_w) return 0.f;
  return x[(static_cast<std::ptrdiff_t>(h) * w.in_w + col) * w.channels + c];
}

// The gradient at input (h, x, c) of one sample: the sum of the d_patches
// entries that read it, in (kh, kw) order; d_patches: the sample's
// (out_h out_w, patch_size) rows, `stride` apart.
TYPEFLOW_HOST_DEVICE float patch_gradient(const float* d_patches, std::size_t stride, const conv_window& w, int h,
                                          int x, int c) {
  float d = 0.f;
  for (int kh = 0; kh < w.kernel_h; ++kh) {
    const int oh = w.output_row(h, kh);
    if (oh < 0) continue;
    for (int kw = 0; kw < w.kernel_w; ++kw) {
      const int ow = w.output_col(x, kw);
      if (ow < 0) continue;
      d += d_patches[(static_cast<std::size_t>(oh) * w.out_w + ow) * stride + (kh * w.kernel_w + kw) * w.channels + c];
    }
  }
  return d;
}

// depthwise_conv2d. kernel: (kh, kw, C, M) with rows of M `kernel_stride`
// apart (padded as stored); x, dy: one sample.
TYPEFLOW_HOST_DEVICE float depthwise_output(const float* x, const float* kernel, int kernel_stride, const conv_window& w,
                                            int oh, int ow, int c, int m) {
  float s = 0.f;
  for (int kh = 0; kh < w.kernel_h; ++kh) {
    const int h = w.row_at(oh, kh);
    if (h < 0 || h >= w.in_h) continue;
    for (int kw = 0; kw < w.kernel_w; ++kw) {
      const int col = w.col_at(ow, kw);
      if (col < 0 || col >= w.in_w) continue;
      s += x[(static_cast<std::ptrdiff_t>(h) * w.in_w + col) * w.channels + c] *
           kernel[(static_cast<std::ptrdiff_t>(kh * w.kernel_w + kw) * w.channels + c) * kernel_stride + m];
    }
  }
  return s;
}

TYPEFLOW_HOST_DEVICE float depthwise_input_gradient(const float* dy, const float* kernel, int kernel_stride,
                                                    int multiplier, const conv_window& w, int h, int x, int c) {
  float d = 0.f;
  const int out_channels = w.channels * multiplier;
  for (int kh = 0; kh < w.kernel_h; ++kh) {
    const int oh = w.output_row(h, kh);
    if (oh < 0) continue;
    for (int kw = 0; kw < w.kernel_w; ++kw) {
      const int ow = w.output_col(x, kw);
      if (ow < 0) continue;
      const float* g = dy + (static_cast<std::ptrdiff_t>(oh) * w.out_w + ow) * out_channels + c * multiplier;
      const float* k = kernel + (static_cast<std::ptrdiff_t>(kh * w.kernel_w + kw) * w.channels + c) * kernel_stride;
      for (int m = 0; m < multiplier; ++m) d += g[m] * k[m];
    }
  }
  return d;
}

// d kernel[kh][kw][c][m] over `batch` samples (x, dy: the first sample's),
// in (n, oh, ow) order.
TYPEFLOW_HOST_DEVICE float depthwise_kernel_gradient(const float* x, const float* dy, int batch, int multiplier,
                                                     const conv_window& w, int kh, int kw, int c, int m) {
  float d = 0.f;
  const int out_channels = w.channels * multiplier;
  for (int n = 0; n < batch; ++n) {
    const float* xn = x + static_cast<std::ptrdiff_t>(n) * static_cast<std::ptrdiff_t>(w.in_size());
    const float* gn = dy + static_cast<std::ptrdiff_t>(n) * static_cast<std::ptrdiff_t>(w.out_positions()) * out_channels;
    for (int oh = 0; oh < w.out_h; ++oh) {
      const int h = w.row_at(oh, kh);
      if (h < 0 || h >= w.in_h) continue;
      for (int ow = 0; ow < w.out_w; ++ow) {
        const int col = w.col_at(ow, kw);
        if (col < 0 || col >= w.in_w) continue;
        d += xn[(static_cast<std::ptrdiff_t>(h) * w.in_w + col) * w.channels + c] *
             gn[(static_cast<std::ptrdiff_t>(oh) * w.out_w + ow) * out_channels + c * multiplier + m];
      }
    }
  }
  return d;
}

}  // namespace typeflow::conv_windows

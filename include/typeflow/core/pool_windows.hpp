// 2-D pooling windows over one channels-last sample (H, W, C), and the
// per-element arithmetic both devices run (layers/pooling.hpp has Keras's
// rules for the numbers; backend/cpu/pooling.hpp runs the windows a row at
// a time, backend/cuda/kernels/pooling.cuh a thread per element, and
// tests/unit/pooling_test.cpp replays the latter against the former):
//
//   max_of_window          an output element: the first maximum in window
//                          order (row-major), and its position there
//   max_window_gradient    an input element: the sum of d_out over the
//                          windows whose argmax it is, in window order
//   average_of_window      the mean of the window's in-bounds elements
//   average_window_gradient  the sum over covering windows of d_out / count
//
// Padding never contributes (max: never read; average: not counted).
#pragma once

#include <cstddef>

#include "typeflow/core/host_device.hpp"

namespace typeflow::pool_windows {

// The in-bounds part of a window along one axis: elements [start + k0, start + k1).
struct span {
  int start, k0, k1;
};
// The windows (outputs) that cover one input element along one axis: [first, last].
struct range {
  int first, last;
};

struct window_2d {
  int in_h, in_w, channels;
  int pool_h, pool_w, stride_h, stride_w;
  int top, left;  // padding before the first row and column
  int out_h, out_w;

  TYPEFLOW_HOST_DEVICE constexpr span rows_of(int oh) const {
    const int h0 = oh * stride_h - top;
    return {h0, h0 < 0 ? -h0 : 0, in_h - h0 < pool_h ? in_h - h0 : pool_h};
  }
  TYPEFLOW_HOST_DEVICE constexpr span cols_of(int ow) const {
    const int w0 = ow * stride_w - left;
    return {w0, w0 < 0 ? -w0 : 0, in_w - w0 < pool_w ? in_w - w0 : pool_w};
  }
  TYPEFLOW_HOST_DEVICE constexpr range covering_rows(int h) const {
    const int hp = h + top, low = hp - pool_h + 1;
    const int first = low <= 0 ? 0 : (low + stride_h - 1) / stride_h;
    const int last = hp / stride_h < out_h - 1 ? hp / stride_h : out_h - 1;
    return {first, last};
  }
  TYPEFLOW_HOST_DEVICE constexpr range covering_cols(int w) const {
    const int wp = w + left, low = wp - pool_w + 1;
    const int first = low <= 0 ? 0 : (low + stride_w - 1) / stride_w;
    const int last = wp / stride_w < out_w - 1 ? wp / stride_w : out_w - 1;
    return {first, last};
  }
  constexpr std::size_t in_size() const { return static_cast<std::size_t>(in_h) * in_w * channels; }
  constexpr std::size_t out_size() const { return static_cast<std::size_t>(out_h) * out_w * channels; }
};

// x: one sample (H, W, C). *arg (when not null) gets the position kh *
// pool_w + kw of the maximum; of equal elements the first stays.
template <class Index>
TYPEFLOW_HOST_DEVICE float max_of_window(const float* x, const window_2d& w, int oh, int ow, int c, Index* arg) {
  const span rows = w.rows_of(oh), cols = w.cols_of(ow);
  const float* first = x + (static_cast<std::ptrdiff_t>(rows.start) * w.in_w + cols.start) * w.channels + c;
  float best = first[(static_cast<std::ptrdiff_t>(rows.k0) * w.in_w + cols.k0) * w.channels];
  int at = rows.k0 * w.pool_w + cols.k0;
  for (int kh = rows.k0; kh < rows.k1; ++kh)
    for (int kw = cols.k0; kw < cols.k1; ++kw) {
      const float v = first[(static_cast<std::ptrdiff_t>(kh) * w.in_w + kw) * w.channels];
      if (v > best) {  // strictly: the first of equals stays
        best = v;
        at = kh * w.pool_w + kw;
      }
    }
  if (arg) *arg = static_cast<Index>(at);
  return best;
}

// dy, arg: one sample's (Hout, Wout, C); the gradient at input (h, x, c).
template <class Index>
TYPEFLOW_HOST_DEVICE float max_window_gradient(const float* dy, const Index* arg, const window_2d& w, int h, int x,
                                               int c) {
  const range oh = w.covering_rows(h), ow = w.covering_cols(x);
  float d = 0.f;
  for (int i = oh.first; i <= oh.last; ++i)
    for (int j = ow.first; j <= ow.last; ++j) {
      const auto k = static_cast<Index>((h + w.top - i * w.stride_h) * w.pool_w + (x + w.left - j * w.stride_w));
      const std::ptrdiff_t at = (static_cast<std::ptrdiff_t>(i) * w.out_w + j) * w.channels + c;
      d += arg[at] == k ? dy[at] : 0.f;
    }
  return d;
}

TYPEFLOW_HOST_DEVICE float average_of_window(const float* x, const window_2d& w, int oh, int ow, int c) {
  const span rows = w.rows_of(oh), cols = w.cols_of(ow);
  float sum = 0.f;
  for (int kh = rows.k0; kh < rows.k1; ++kh)
    for (int kw = cols.k0; kw < cols.k1; ++kw)
      sum += x[(static_cast<std::ptrdiff_t>(rows.start + kh) * w.in_w + cols.start + kw) * w.channels + c];
  return sum * (1.f / static_cast<float>((rows.k1 - rows.k0) * (cols.k1 - cols.k0)));
}

TYPEFLOW_HOST_DEVICE float average_window_gradient(const float* dy, const window_2d& w, int h, int x, int c) {
  const range oh = w.covering_rows(h), ow = w.covering_cols(x);
  float d = 0.f;
  for (int i = oh.first; i <= oh.last; ++i) {
    const span rows = w.rows_of(i);
    for (int j = ow.first; j <= ow.last; ++j) {
      const span cols = w.cols_of(j);
      const float scale = 1.f / static_cast<float>((rows.k1 - rows.k0) * (cols.k1 - cols.k0));
      d += dy[(static_cast<std::ptrdiff_t>(i) * w.out_w + j) * w.channels + c] * scale;
    }
  }
  return d;
}

}  // namespace typeflow::pool_windows

// 2-D pooling on the CPU (layers/pooling.hpp): max, average and global
// average pooling over channels-last samples.
//
// The loops are our own, channels innermost (contiguous, vectorised), split
// over the cores by output rows in forward and by input rows in backward.
// Backward gathers: each input element sums the gradients of the windows that
// cover it, so every d_in element is written once, with no zeroing pass and
// no two threads writing one element, whether windows overlap (stride < pool)
// or leave gaps (stride > pool). Measured on this project's 2-core AVX2
// machine (a scratch timer, OMP_NUM_THREADS=2, median of 50 calls) at the
// MNIST CNN's batch 128, pool 2, against oneDNN 2.6.3's nhwc pooling
// primitives (jit:avx2; max in forward_training with its workspace):
//   max 26x26x32 -> 13x13x32: forward 0.36 ms, backward 0.85 ms (oneDNN 5.0, 3.6)
//   max 11x11x64 ->  5x5x64:  forward 0.08 ms, backward 0.10 ms (oneDNN 1.2, 0.8)
//   average 26x26x32:         forward 0.44 ms, backward 0.83 ms (oneDNN 0.77, 1.57)
// Max pooling's forward without the argmax (evaluate, predict): 0.21 ms.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "typeflow/core/parallel.hpp"
#include "typeflow/layers/pooling.hpp"
#include "typeflow/contract/executor.hpp"

namespace typeflow {

namespace detail {

// Max pooling, forward, one output row of one sample: out (Wout, C) and its
// argmax (Wout, C) from x, the sample (H, W, C). The running maximum and
// argmax live in local arrays of up to 64 channels and the argmax is blended
// with a bit mask: with `a[c] = greater ? k : a[c]` on the output itself g++
// 12 emits masked stores (vmaskmov), which AMD's cores run slowly. One core,
// MNIST's first pool: 4.3 ms with masked stores, 1.0-1.3 ms without.
template <class G, class Index>
inline void max_pool_row(const float* x, float* out, Index* arg, int oh) {
  constexpr int C = G::channels;
  constexpr int block = C < 64 ? C : 64;
  const auto rows = G::rows_of(oh);
  for (int ow = 0; ow < G::out_w; ++ow) {
    const auto cols = G::cols_of(ow);
    const float* first = x + (static_cast<std::ptrdiff_t>(rows.start) * G::in_w + cols.start) * C;
    for (int c0 = 0; c0 < C; c0 += block) {
      const int n = C - c0 < block ? C - c0 : block;
      float best[block];
      Index at[block];
      {
        const float* p = first + (static_cast<std::ptrdiff_t>(rows.k0) * G::in_w + cols.k0) * C + c0;
        const auto k = static_cast<Index>(rows.k0 * G::pool_w + cols.k0);
#pragma omp simd
        for (int c = 0; c < n; ++c) {
          best[c] = p[c];
          at[c] = k;
        }
      }
      for (int kh = rows.k0; kh < rows.k1; ++kh) {
        for (int kw = cols.k0; kw < cols.k1; ++kw) {
          if (kh == rows.k0 && kw == cols.k0) continue;
          const float* p = first + (static_cast<std::ptrdiff_t>(kh) * G::in_w + kw) * C + c0;
          const auto k = static_cast<Index>(kh * G::pool_w + kw);
#pragma omp simd
          for (int c = 0; c < n; ++c) {
            const bool greater = p[c] > best[c];  // strictly: the first of equals stays
            const auto mask = static_cast<Index>(-static_cast<int>(greater));
            best[c] = greater ? p[c] : best[c];
            at[c] = static_cast<Index>((at[c] & ~mask) | (k & mask));
          }
        }
      }
      float* o = out + static_cast<std::ptrdiff_t>(ow) * C + c0;
      Index* a = arg + static_cast<std::ptrdiff_t>(ow) * C + c0;
#pragma omp simd
      for (int c = 0; c < n; ++c) {
        o[c] = best[c];
        a[c] = at[c];
      }
    }
  }
}

// Max pooling, forward without the argmax (inference).
template <class G>
inline void max_pool_row(const float* x, float* out, int oh) {
  constexpr int C = G::channels;
  const auto rows = G::rows_of(oh);
  for (int ow = 0; ow < G::out_w; ++ow) {
    const auto cols = G::cols_of(ow);
    float* o = out + static_cast<std::ptrdiff_t>(ow) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = -std::numeric_limits<float>::infinity();
    for (int kh = rows.k0; kh < rows.k1; ++kh) {
      for (int kw = cols.k0; kw < cols.k1; ++kw) {
        const float* p = x + (static_cast<std::ptrdiff_t>(rows.start + kh) * G::in_w + cols.start + kw) * C;
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          const float v = p[c], best = o[c];
          o[c] = v > best ? v : best;
        }
      }
    }
  }
}

// Max pooling, backward, one input row h of one sample: dx (W, C) = the sum,
// over the windows covering each element, of d_out where the argmax is it.
template <class G, class Index>
inline void max_pool_backward_row(float* dx, const float* dy, const Index* arg, int h) {
  constexpr int C = G::channels;
  const auto oh = G::covering_rows(h);
  for (int w = 0; w < G::in_w; ++w) {
    float* d = dx + static_cast<std::ptrdiff_t>(w) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) d[c] = 0.f;
    const auto ow = G::covering_cols(w);
    for (int i = oh.first; i <= oh.last; ++i) {
      for (int j = ow.first; j <= ow.last; ++j) {
        const auto k = static_cast<Index>((h + G::top - i * G::stride_h) * G::pool_w + (w + G::left - j * G::stride_w));
        const std::ptrdiff_t at = (static_cast<std::ptrdiff_t>(i) * G::out_w + j) * C;
        const float* g = dy + at;
        const Index* a = arg + at;
#pragma omp simd
        for (int c = 0; c < C; ++c) d[c] += a[c] == k ? g[c] : 0.f;
      }
    }
  }
}

// Average pooling, forward, one output row of one sample.
template <class G>
inline void average_pool_row(const float* x, float* out, int oh) {
  constexpr int C = G::channels;
  const auto rows = G::rows_of(oh);
  for (int ow = 0; ow < G::out_w; ++ow) {
    const auto cols = G::cols_of(ow);
    float* o = out + static_cast<std::ptrdiff_t>(ow) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = 0.f;
    for (int kh = rows.k0; kh < rows.k1; ++kh) {
      for (int kw = cols.k0; kw < cols.k1; ++kw) {
        const float* p = x + (static_cast<std::ptrdiff_t>(rows.start + kh) * G::in_w + cols.start + kw) * C;
#pragma omp simd
        for (int c = 0; c < C; ++c) o[c] += p[c];
      }
    }
    const float scale = 1.f / static_cast<float>((rows.k1 - rows.k0) * (cols.k1 - cols.k0));
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] *= scale;
  }
}

// Average pooling, backward, one input row h of one sample: each element
// gets d_out / (the window's in-bounds count) from every window covering it.
template <class G>
inline void average_pool_backward_row(float* dx, const float* dy, int h) {
  constexpr int C = G::channels;
  const auto oh = G::covering_rows(h);
  for (int w = 0; w < G::in_w; ++w) {
    float* d = dx + static_cast<std::ptrdiff_t>(w) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) d[c] = 0.f;
    const auto ow = G::covering_cols(w);
    for (int i = oh.first; i <= oh.last; ++i) {
      const auto rows = G::rows_of(i);
      for (int j = ow.first; j <= ow.last; ++j) {
        const auto cols = G::cols_of(j);
        const float scale = 1.f / static_cast<float>((rows.k1 - rows.k0) * (cols.k1 - cols.k0));
        const float* g = dy + (static_cast<std::ptrdiff_t>(i) * G::out_w + j) * C;
#pragma omp simd
        for (int c = 0; c < C; ++c) d[c] += g[c] * scale;
      }
    }
  }
}

}  // namespace detail

template <window Pool, window Strides, padding Padding, class Layer, int Batch>
class executor<max_pooling2d<Pool, Strides, Padding>, Layer, Batch, cpu> : public executor_defaults {
  using G = typename Layer::geometry;
  using index_type = typename Layer::index_type;

 public:
  explicit executor(const layer_io<cpu>& io) : io_(io) {}

  void forward() {
    const float* in = io_.in;
    float* out = io_.out;
    auto* arg = reinterpret_cast<index_type*>(io_.workspace);
    constexpr std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(Batch) * G::out_h;
    constexpr std::ptrdiff_t row_work = static_cast<std::ptrdiff_t>(G::out_w) * G::channels * G::window_size;
    if (io_.run && !io_.run->training) {  // no backward follows: no argmax
      typeflow::parallel_rows(rows, row_work, [=](std::ptrdiff_t r) {
        const std::ptrdiff_t n = r / G::out_h, oh = r % G::out_h;
        detail::max_pool_row<G>(in + n * G::in_size, out + r * G::out_w * G::channels, static_cast<int>(oh));
      });
      return;
    }
    typeflow::parallel_rows(rows, row_work, [=](std::ptrdiff_t r) {
      const std::ptrdiff_t n = r / G::out_h, oh = r % G::out_h;
      const std::ptrdiff_t at = r * G::out_w * G::channels;
      detail::max_pool_row<G>(in + n * G::in_size, out + at, arg + at, static_cast<int>(oh));
    });
  }

  void backward() {
    if (!io_.d_in) return;
    float* d_in = io_.d_in;
    const float* d_out = io_.d_out;
    const auto* arg = reinterpret_cast<const index_type*>(io_.workspace);
    constexpr std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(Batch) * G::in_h;
    typeflow::parallel_rows(rows, static_cast<std::ptrdiff_t>(G::in_w) * G::channels, [=](std::ptrdiff_t r) {
      const std::ptrdiff_t n = r / G::in_h, h = r % G::in_h;
      detail::max_pool_backward_row<G>(d_in + r * G::in_w * G::channels, d_out + n * G::out_size,
                                       arg + n * G::out_size, static_cast<int>(h));
    });
  }

 private:
  layer_io<cpu> io_;
};

template <window Pool, window Strides, padding Padding, class Layer, int Batch>
class executor<average_pooling2d<Pool, Strides, Padding>, Layer, Batch, cpu> : public executor_defaults {
  using G = typename Layer::geometry;

 public:
  explicit executor(const layer_io<cpu>& io) : io_(io) {}

  void forward() {
    const float* in = io_.in;
    float* out = io_.out;
    constexpr std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(Batch) * G::out_h;
    constexpr std::ptrdiff_t row_work = static_cast<std::ptrdiff_t>(G::out_w) * G::channels * G::window_size;
    typeflow::parallel_rows(rows, row_work, [=](std::ptrdiff_t r) {
      const std::ptrdiff_t n = r / G::out_h, oh = r % G::out_h;
      detail::average_pool_row<G>(in + n * G::in_size, out + r * G::out_w * G::channels, static_cast<int>(oh));
    });
  }

  void backward() {
    if (!io_.d_in) return;
    float* d_in = io_.d_in;
    const float* d_out = io_.d_out;
    constexpr std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(Batch) * G::in_h;
    typeflow::parallel_rows(rows, static_cast<std::ptrdiff_t>(G::in_w) * G::channels, [=](std::ptrdiff_t r) {
      const std::ptrdiff_t n = r / G::in_h, h = r % G::in_h;
      detail::average_pool_backward_row<G>(d_in + r * G::in_w * G::channels, d_out + n * G::out_size,
                                           static_cast<int>(h));
    });
  }

 private:
  layer_io<cpu> io_;
};

template <class Layer, int Batch>
class executor<global_average_pooling2d, Layer, Batch, cpu> : public executor_defaults {
  static constexpr int channels = Layer::channels;
  static constexpr std::ptrdiff_t pixels = Layer::pixels;
  static constexpr float scale = 1.f / static_cast<float>(pixels);

 public:
  explicit executor(const layer_io<cpu>& io) : io_(io) {}

  void forward() {
    const float* in = io_.in;
    float* out = io_.out;
    typeflow::parallel_rows(Batch, pixels * channels, [=](std::ptrdiff_t n) {
      const float* x = in + n * pixels * channels;
      float* o = out + n * channels;
#pragma omp simd
      for (int c = 0; c < channels; ++c) o[c] = 0.f;
      for (std::ptrdiff_t p = 0; p < pixels; ++p) {
#pragma omp simd
        for (int c = 0; c < channels; ++c) o[c] += x[p * channels + c];
      }
#pragma omp simd
      for (int c = 0; c < channels; ++c) o[c] *= scale;
    });
  }

  void backward() {
    if (!io_.d_in) return;
    float* d_in = io_.d_in;
    const float* d_out = io_.d_out;
    typeflow::parallel_rows(static_cast<std::ptrdiff_t>(Batch) * pixels, channels, [=](std::ptrdiff_t r) {
      const float* g = d_out + (r / pixels) * channels;
      float* d = d_in + r * channels;
#pragma omp simd
      for (int c = 0; c < channels; ++c) d[c] = g[c] * scale;
    });
  }

 private:
  layer_io<cpu> io_;
};

}  // namespace typeflow

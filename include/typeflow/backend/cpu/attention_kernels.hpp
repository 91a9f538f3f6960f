// causal_self_attention's per-head kernels on the CPU (backend/cpu/attention.hpp
// runs them): register-blocked products of 6 rows against panels of 16
// columns (AVX2: 6 x 16; AVX-512: 6 x 32, two panels at once), the panels'
// packing, an exp for x <= 0 (Cephes's polynomial, within 2 ulp), and a
// softmax row and its backward over the lower triangle with a band of zeros
// after it. tests/unit/attention_test.cpp checks the product kernel against
// fused multiply-adds in order.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if (defined(__AVX2__) && defined(__FMA__)) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "typeflow/backend/cpu/attention_bf16_kernels.hpp"  // with_rows

namespace typeflow {

namespace detail {

// The per-head kernels: row blocks of 6 against panels of 16 columns.
namespace attention_kernels {

inline constexpr int tile_rows = 6;
inline constexpr int panel_width = 16;

#if defined(__AVX2__) && defined(__FMA__)
// Transposes the 8 x 8 block in r[0..8).
inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}
#endif

// Packs the (k x n) matrix whose element (p, j) is src[p * row + j] as
// panels of 16 columns, one after another: panel c holds columns 16c..16c+15
// as k rows of 16 floats (zeros past n), so a product streams it in order.
inline void pack_panels(int k, int n, const float* src, std::ptrdiff_t row, float* out) {
  for (int c0 = 0; c0 < n; c0 += panel_width) {
    float* panel = out + static_cast<std::ptrdiff_t>(c0) * k;
    const int w = std::min(panel_width, n - c0);
    for (int p = 0; p < k; ++p) {
      float* dst = panel + static_cast<std::ptrdiff_t>(p) * panel_width;
      const float* s = src + p * row + c0;
      if (w == panel_width) {
        std::memcpy(dst, s, sizeof(float) * panel_width);
      } else {
        for (int j = 0; j < w; ++j) dst[j] = s[j];
        for (int j = w; j < panel_width; ++j) dst[j] = 0.f;
      }
    }
  }
}

// The same for the transpose: packs the (k x n) matrix whose element (p, j)
// is src[j * col + p] (the transpose of n rows of k floats, row stride col).
inline void pack_panels_transposed(int k, int n, const float* src, std::ptrdiff_t col, float* out) {
  for (int c0 = 0; c0 < n; c0 += panel_width) {
    float* panel = out + static_cast<std::ptrdiff_t>(c0) * k;
    const int w = std::min(panel_width, n - c0);
#if defined(__AVX2__) && defined(__FMA__)
    if (w == panel_width && k % 8 == 0) {
      for (int p0 = 0; p0 < k; p0 += 8)
        for (int half = 0; half < panel_width; half += 8) {
          __m256 r[8];
          for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + (c0 + half + i) * col + p0);
          transpose8(r);
          for (int i = 0; i < 8; ++i) _mm256_storeu_ps(panel + (p0 + i) * panel_width + half, r[i]);
        }
      continue;
    }
#endif
    for (int j = 0; j < w; ++j) {
      const float* s = src + (c0 + j) * col;
      for (int p = 0; p < k; ++p) panel[p * panel_width + j] = s[p];
    }
    for (int p = 0; p < k; ++p)
      for (int j = w; j < panel_width; ++j) panel[p * panel_width + j] = 0.f;
  }
}

// C (MR x cols) = A (MR x k) · panel (k x 16), cols <= 16 of them stored.
// A's element (r, p) is a[r * a_row + p * a_col], so A may be a transpose.
template <int MR>
inline void tile(int k, const float* a, std::ptrdiff_t a_row, std::ptrdiff_t a_col, const float* panel, float* c,
                 std::ptrdiff_t ldc, int cols) {
#if defined(__AVX2__) && defined(__FMA__)
  __m256 lo[MR], hi[MR];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  for (int p = 0; p < k; ++p) {
    const __m256 b0 = _mm256_loadu_ps(panel), b1 = _mm256_loadu_ps(panel + 8);
    panel += panel_width;
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + r * a_row);
      lo[r] = _mm256_fmadd_ps(x, b0, lo[r]);
      hi[r] = _mm256_fmadd_ps(x, b1, hi[r]);
    }
    a += a_col;
  }
  if (cols >= panel_width) {
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      _mm256_storeu_ps(c + r * ldc, lo[r]);
      _mm256_storeu_ps(c + r * ldc + 8, hi[r]);
    }
  } else {
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), lanes);
    const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols - 8), lanes);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      _mm256_maskstore_ps(c + r * ldc, m0, lo[r]);
      _mm256_maskstore_ps(c + r * ldc + 8, m1, hi[r]);
    }
  }
#else
  float acc[MR][panel_width] = {};
  for (int p = 0; p < k; ++p) {
    for (int r = 0; r < MR; ++r) {
      const float x = a[r * a_row];
#pragma omp simd
      for (int j = 0; j < panel_width; ++j) acc[r][j] += x * panel[j];
    }
    panel += panel_width;
    a += a_col;
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < cols && j < panel_width; ++j) c[r * ldc + j] = acc[r][j];
#endif
}

#ifdef __AVX512F__
// tile's AVX-512 form: C (MR x cols) over Panels adjacent panels (16 Panels
// columns, cols <= that many stored), one zmm per row and panel. Two panels
// give 12 accumulators, as many as the AVX2 tile's, at twice its width; each
// element's sum runs over p in the same order, so the results are the AVX2
// tile's bit for bit.
template <int MR, int Panels>
inline void tile_avx512(int k, const float* a, std::ptrdiff_t a_row, std::ptrdiff_t a_col, const float* panel,
                        std::ptrdiff_t panel_stride, float* c, std::ptrdiff_t ldc, int cols) {
  __m512 acc[MR][Panels];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r)
    for (int q = 0; q < Panels; ++q) acc[r][q] = _mm512_setzero_ps();
  for (int p = 0; p < k; ++p) {
    __m512 b[Panels];
    for (int q = 0; q < Panels; ++q) b[q] = _mm512_loadu_ps(panel + q * panel_stride);
    panel += panel_width;
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * a_row]);
      for (int q = 0; q < Panels; ++q) acc[r][q] = _mm512_fmadd_ps(x, b[q], acc[r][q]);
    }
    a += a_col;
  }
  __mmask16 mask[Panels];
  for (int q = 0; q < Panels; ++q) {
    const int w = cols - panel_width * q;
    mask[q] = static_cast<__mmask16>(w >= panel_width ? 0xFFFF : w > 0 ? (1u << w) - 1 : 0);
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
    for (int q = 0; q < Panels; ++q) _mm512_mask_storeu_ps(c + r * ldc + panel_width * q, mask[q], acc[r][q]);
}
#endif

// C (rows x n) = A (rows x k) · B (k x n), rows <= 6, with B packed by
// pack_panels; panel_stride is the floats from one panel to the next (the
// packed matrix's k times 16, which may exceed this product's k when it
// starts further down the panels).
inline void tile_product(int rows, int k, const float* a, std::ptrdiff_t a_row, std::ptrdiff_t a_col,
                         const float* panels, std::ptrdiff_t panel_stride, int n, float* c, std::ptrdiff_t ldc) {
#ifdef __AVX512F__
  // Two panels at a time where the CPU has AVX-512 (the build's -march).
  for (int c0 = 0; c0 < n; c0 += 2 * panel_width) {
    const float* panel = panels + (c0 / panel_width) * panel_stride;
    const int cols = std::min(2 * panel_width, n - c0);
    with_rows(rows, [&](auto mr) {
      if (cols > panel_width)
        tile_avx512<decltype(mr)::value, 2>(k, a, a_row, a_col, panel, panel_stride, c + c0, ldc, cols);
      else
        tile_avx512<decltype(mr)::value, 1>(k, a, a_row, a_col, panel, panel_stride, c + c0, ldc, cols);
    });
  }
#else
  for (int c0 = 0; c0 < n; c0 += panel_width) {
    const float* panel = panels + (c0 / panel_width) * panel_stride;
    const int cols = std::min(panel_width, n - c0);
    with_rows(rows, [&](auto mr) { tile<decltype(mr)::value>(k, a, a_row, a_col, panel, c + c0, ldc, cols); });
  }
#endif
}

#if defined(__AVX2__) && defined(__FMA__)
// exp(x) for x <= 0 in [-87.3, 0], Cephes's expf polynomial: within 2 ulp.
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3365f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float horizontal_max(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

// row[0..n) holds scores; afterwards softmax(scale * scores), and zeros in
// row[n..zero_end).
inline void softmax_row(float* row, int n, float scale, int zero_end) {
#if defined(__AVX2__) && defined(__FMA__)
  // Whole vectors, then the last n % 8 through a mask.
  const int whole = n / 8 * 8, rest = n - whole;
  const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(rest), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256 lowest = _mm256_set1_ps(-3.4e38f);
  __m256 m = lowest;
  for (int j = 0; j < whole; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(row + j));
  if (rest) m = _mm256_max_ps(m, _mm256_blendv_ps(lowest, _mm256_maskload_ps(row + whole, tail), _mm256_castsi256_ps(tail)));
  const float largest = horizontal_max(m);
  const __m256 s = _mm256_set1_ps(scale), shift = _mm256_set1_ps(-largest * scale);
  __m256 total = _mm256_setzero_ps();
  for (int j = 0; j < whole; j += 8) {
    const __m256 e = exp8(_mm256_fmadd_ps(_mm256_loadu_ps(row + j), s, shift));
    _mm256_storeu_ps(row + j, e);
    total = _mm256_add_ps(total, e);
  }
  if (rest) {
    const __m256 e = _mm256_and_ps(exp8(_mm256_fmadd_ps(_mm256_maskload_ps(row + whole, tail), s, shift)),
                                   _mm256_castsi256_ps(tail));
    _mm256_maskstore_ps(row + whole, tail, e);
    total = _mm256_add_ps(total, e);
  }
  const float sum = horizontal_sum(total);
#else
  float largest = row[0];
  for (int j = 1; j < n; ++j) largest = std::max(largest, row[j]);
  const float shift = -largest * scale;
  float sum = 0.f;
  for (int j = 0; j < n; ++j) {
    const float e = std::exp(row[j] * scale + shift);
    row[j] = e;
    sum += e;
  }
#endif
  const float inverse = 1.f / sum;
#pragma omp simd
  for (int i = 0; i < n; ++i) row[i] *= inverse;
  for (int i = n; i < zero_end; ++i) row[i] = 0.f;
}

// The softmax's backward for one row of n: grad holds d(loss)/d(P) (or, with
// dropout, d(loss)/d(dropped P), and keep the row's mask); afterwards
// scale * P * (g - sum(P * g)), with g the gradient through the dropout, and
// zeros in grad[n..zero_end).
inline void softmax_backward_row(const float* p, float* grad, int n, float scale, const std::uint8_t* keep,
                                 float keep_scale, int zero_end) {
  float dot = 0.f;
  if (keep) {
#pragma omp simd
    for (int j = 0; j < n; ++j) grad[j] = keep[j] ? grad[j] * keep_scale : 0.f;
  }
#pragma omp simd reduction(+ : dot)
  for (int j = 0; j < n; ++j) dot += p[j] * grad[j];
#pragma omp simd
  for (int j = 0; j < n; ++j) grad[j] = scale * p[j] * (grad[j] - dot);
  for (int j = n; j < zero_end; ++j) grad[j] = 0.f;
}

}  // namespace attention_kernels
}  // namespace detail

}  // namespace typeflow

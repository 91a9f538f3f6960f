// causal_self_attention's per-head products in bf16, for the native path
// under mixed_bfloat16 (backend/cpu/attention.hpp): AVX512-BF16's vdpbf16ps
// adds a0 b0 + a1 b1 to a float32 for each pair of bf16, twice float32 FMA's
// rate. The operands are the float32 path's (already rounded to bf16, so
// the conversions here are exact), the accumulation float32: the results
// differ from the emulated path's only in the order of the sums.
//
// A pair word is two bf16 in 32 bits, the even element of the contracted
// dimension in the low half (vdpbf16ps's order). Products contract over
// pairs, so each operand is stored as pair words:
//   A, row by row:  A's element (r, pair p) at a[r * a_row + p * a_col];
//                   a row-major A (a_col 1, pack_row_pairs) or a transposed
//                   one (a_row 1, interleave_rows on two rows of A^T)
//   B, by panels:   columns 16c..16c+15 of pair row p at panel c, word
//                   p * 16 + j (pack_panel_pairs, pack_panel_pairs_transposed)
// Zeros fill an odd last pair and the columns past n.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__)
#include <immintrin.h>
#define TYPEFLOW_ATTENTION_BF16_KERNELS 1
#endif

namespace typeflow::detail::attention_kernels {

// Whether this build has the bf16 kernels (compiled for AVX512-BF16).
#ifdef TYPEFLOW_ATTENTION_BF16_KERNELS
inline constexpr bool bf16_kernels = true;
#else
inline constexpr bool bf16_kernels = false;
#endif

inline constexpr int pair_panel_width = 16;  // pair words per panel row: one zmm

// The pair words n values take.
constexpr int pairs(int n) { return (n + 1) / 2; }

// f(std::integral_constant<int, R>{}) for rows == R, 1 <= R <= 6 (a row
// block, tile_rows): the kernels here and in attention_kernels.hpp take the row
// count as a template parameter, so that their accumulators stay in
// registers.
template <class F>
inline void with_rows(int rows, F&& f) {
  switch (rows) {
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 1: f(std::integral_constant<int, 1>{}); break;
    default: break;
  }
}

#ifdef TYPEFLOW_ATTENTION_BF16_KERNELS

// The words of a[0..n) (contiguous floats), bf16 rounded to nearest even,
// zero past n: pairs(n) words. vcvtneps2bf16 alone, without convert()'s
// (core/half.hpp) care for subnormals: vdpbf16ps reads those as zero anyway.
inline void convert_pairs(const float* a, int n, std::uint32_t* out) {
  int i = 0;
  for (; i + 32 <= n; i += 32)
    _mm512_storeu_si512(out + i / 2, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(a + i)));
  if (i < n) {
    const int rest = n - i;
    const auto lo = static_cast<__mmask16>(rest >= 16 ? 0xFFFF : (1u << rest) - 1);
    const auto hi = static_cast<__mmask16>(rest <= 16 ? 0 : (1u << (rest - 16)) - 1);
    const __m512i w = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, a + i + 16), _mm512_maskz_loadu_ps(lo, a + i));
    _mm512_mask_storeu_epi32(out + i / 2, static_cast<__mmask16>((1u << pairs(rest)) - 1), w);
  }
}

// out[j] = (r0[j], r1[j]) for j < n: two rows of a matrix interleaved into
// one row of pair words (r1 null: zeros in the high halves).
inline void interleave_rows(const float* r0, const float* r1, int n, std::uint32_t* out) {
  // The zero-masking forms: GCC 12 warns on the plain ones' undefined source.
  constexpr __mmask16 all = 0xFFFF;
  for (int j = 0; j < n; j += 16) {
    const auto m = static_cast<__mmask16>(n - j >= 16 ? 0xFFFF : (1u << (n - j)) - 1);
    const __m512i lo = _mm512_maskz_cvtepu16_epi32(all, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, r0 + j)));
    __m512i w = lo;
    if (r1) {
      const __m512i hi =
          _mm512_maskz_cvtepu16_epi32(all, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, r1 + j)));
      w = _mm512_or_si512(lo, _mm512_maskz_slli_epi32(all, hi, 16));
    }
    _mm512_mask_storeu_epi32(out + j, m, w);
  }
}

// rows x n row-major floats (row stride src_row) as rows of pairs(n) words
// (row stride out_row).
inline void pack_row_pairs(int rows, int n, const float* src, std::ptrdiff_t src_row, std::uint32_t* out,
                           std::ptrdiff_t out_row) {
  for (int r = 0; r < rows; ++r) convert_pairs(src + r * src_row, n, out + r * out_row);
}

// B (k x n) with element (p, j) = src[p * row + j] as panels: pairs(k) pair
// rows per panel, panels pairs(k) * 16 words apart.
inline void pack_panel_pairs(int k, int n, const float* src, std::ptrdiff_t row, std::uint32_t* out) {
  const std::ptrdiff_t panel_words = static_cast<std::ptrdiff_t>(pairs(k)) * pair_panel_width;
  for (int p = 0; p < k; p += 2) {
    const float* r0 = src + p * row;
    const float* r1 = p + 1 < k ? r0 + row : nullptr;
    for (int c0 = 0; c0 < n; c0 += pair_panel_width) {
      std::uint32_t* dst = out + (c0 / pair_panel_width) * panel_words + (p / 2) * pair_panel_width;
      const int w = std::min(pair_panel_width, n - c0);
      if (w < pair_panel_width) _mm512_storeu_si512(dst, _mm512_setzero_si512());
      interleave_rows(r0 + c0, r1 ? r1 + c0 : nullptr, w, dst);
    }
  }
}

// Transposes the 16 x 16 words in r[0..16): 4 x 4 transposes inside each
// 128-bit lane, then of the lanes across groups of four rows.
inline void transpose16(__m512i r[16]) {
  // The zero-masking forms: GCC 12 warns on the plain ones' undefined source.
  constexpr __mmask16 all = 0xFFFF;
  constexpr __mmask8 all8 = 0xFF;
  __m512i u[16];  // u[4g + m], lane L: rows 4g..4g+3 at column 4L + m
  for (int g = 0; g < 4; ++g) {
    const __m512i t0 = _mm512_maskz_unpacklo_epi32(all, r[4 * g], r[4 * g + 1]),
                  t1 = _mm512_maskz_unpackhi_epi32(all, r[4 * g], r[4 * g + 1]);
    const __m512i t2 = _mm512_maskz_unpacklo_epi32(all, r[4 * g + 2], r[4 * g + 3]),
                  t3 = _mm512_maskz_unpackhi_epi32(all, r[4 * g + 2], r[4 * g + 3]);
    u[4 * g] = _mm512_maskz_unpacklo_epi64(all8, t0, t2);
    u[4 * g + 1] = _mm512_maskz_unpackhi_epi64(all8, t0, t2);
    u[4 * g + 2] = _mm512_maskz_unpacklo_epi64(all8, t1, t3);
    u[4 * g + 3] = _mm512_maskz_unpackhi_epi64(all8, t1, t3);
  }
  for (int m = 0; m < 4; ++m) {
    const __m512i v0 = _mm512_maskz_shuffle_i32x4(all, u[m], u[4 + m], 0x44),
                  v1 = _mm512_maskz_shuffle_i32x4(all, u[m], u[4 + m], 0xEE);
    const __m512i v2 = _mm512_maskz_shuffle_i32x4(all, u[8 + m], u[12 + m], 0x44),
                  v3 = _mm512_maskz_shuffle_i32x4(all, u[8 + m], u[12 + m], 0xEE);
    r[m] = _mm512_maskz_shuffle_i32x4(all, v0, v2, 0x88);
    r[4 + m] = _mm512_maskz_shuffle_i32x4(all, v0, v2, 0xDD);
    r[8 + m] = _mm512_maskz_shuffle_i32x4(all, v1, v3, 0x88);
    r[12 + m] = _mm512_maskz_shuffle_i32x4(all, v1, v3, 0xDD);
  }
}

// The same for B = S^T, S (n x k) with rows src_row apart: B's (p, j) is
// S[j][p], so a pair is two neighbours in a row of S. By blocks of 16
// columns (rows of S) and 16 pairs: converted, then transposed.
inline void pack_panel_pairs_transposed(int k, int n, const float* src, std::ptrdiff_t src_row, std::uint32_t* out) {
  const int kp = pairs(k);
  const std::ptrdiff_t panel_words = static_cast<std::ptrdiff_t>(kp) * pair_panel_width;
  for (int j0 = 0; j0 < n; j0 += pair_panel_width) {
    std::uint32_t* panel = out + (j0 / pair_panel_width) * panel_words;
    for (int p0 = 0; p0 < kp; p0 += 16) {
      const int rest = k - 2 * p0;  // floats left in each row
      const auto lo = static_cast<__mmask16>(rest >= 16 ? 0xFFFF : (1u << rest) - 1);
      const auto hi = static_cast<__mmask16>(rest >= 32 ? 0xFFFF : rest <= 16 ? 0 : (1u << (rest - 16)) - 1);
      __m512i r[16];
      for (int jj = 0; jj < 16; ++jj) {
        if (j0 + jj < n) {
          const float* row = src + (j0 + jj) * src_row + 2 * p0;
          r[jj] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, row + 16), _mm512_maskz_loadu_ps(lo, row));
        } else {
          r[jj] = _mm512_setzero_si512();
        }
      }
      transpose16(r);
      for (int i = 0; i < std::min(16, kp - p0); ++i) _mm512_storeu_si512(panel + (p0 + i) * pair_panel_width, r[i]);
    }
  }
}

// C (MR x cols) = A (MR x 2 k_pairs) · B over Panels adjacent panels
// (16 Panels columns, cols <= that many stored).
template <int MR, int Panels>
inline void tile_bf16(int k_pairs, const std::uint32_t* a, std::ptrdiff_t a_row, std::ptrdiff_t a_col,
                      const std::uint32_t* panel, std::ptrdiff_t panel_stride, float* c, std::ptrdiff_t ldc, int cols) {
  __m512 acc[MR][Panels];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r)
    for (int q = 0; q < Panels; ++q) acc[r][q] = _mm512_setzero_ps();
  for (int p = 0; p < k_pairs; ++p) {
    __m512bh b[Panels];
    for (int q = 0; q < Panels; ++q) b[q] = (__m512bh)_mm512_loadu_si512(panel + q * panel_stride);
    panel += pair_panel_width;
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r * a_row]));
      for (int q = 0; q < Panels; ++q) acc[r][q] = _mm512_dpbf16_ps(acc[r][q], x, b[q]);
    }
    a += a_col;
  }
  __mmask16 mask[Panels];
  for (int q = 0; q < Panels; ++q) {
    const int w = cols - 16 * q;
    mask[q] = static_cast<__mmask16>(w >= 16 ? 0xFFFF : w > 0 ? (1u << w) - 1 : 0);
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
    for (int q = 0; q < Panels; ++q) _mm512_mask_storeu_ps(c + r * ldc + 16 * q, mask[q], acc[r][q]);
}

// C (rows x n) = A (rows x 2 k_pairs) · B, rows <= 6, B packed in panels
// panel_stride words apart, two panels (12 accumulators) at a time.
inline void tile_product_bf16(int rows, int k_pairs, const std::uint32_t* a, std::ptrdiff_t a_row,
                              std::ptrdiff_t a_col, const std::uint32_t* panels, std::ptrdiff_t panel_stride, int n,
                              float* c, std::ptrdiff_t ldc) {
  for (int c0 = 0; c0 < n; c0 += 2 * pair_panel_width) {
    const std::uint32_t* panel = panels + (c0 / pair_panel_width) * panel_stride;
    const int cols = std::min(2 * pair_panel_width, n - c0);
    with_rows(rows, [&](auto mr) {
      if (cols > pair_panel_width)
        tile_bf16<decltype(mr)::value, 2>(k_pairs, a, a_row, a_col, panel, panel_stride, c + c0, ldc, cols);
      else
        tile_bf16<decltype(mr)::value, 1>(k_pairs, a, a_row, a_col, panel, panel_stride, c + c0, ldc, cols);
    });
  }
}

#endif  // TYPEFLOW_ATTENTION_BF16_KERNELS

}  // namespace typeflow::detail::attention_kernels

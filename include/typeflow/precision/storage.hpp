// Moving float32 values in and out of a 16-bit compute dtype, in bulk.
//
//   round_in_place<Dtype>(values, n)    each value becomes the nearest Dtype
//                                       value, held as a float (ties to even;
//                                       float16 overflows to infinity)
//   round_into<Dtype>(in, out, n)       the same, from in into out, one pass
//   round_row<Dtype>(values, n)         round_in_place on the calling thread
//   to_float<Dtype>(stored, out, n)     Dtype storage -> float32
//   from_float<Dtype>(values, out, n)   float32 -> Dtype storage, rounded
//
// Dtype is float32 (a no-op or a copy), float16 or bfloat16. Layers that
// compute in 16 bits on a CPU without 16-bit matrix products (oneDNN 2.6 has
// none for AVX2) round their operands and results through these, so that
// the values, and float16's overflows, are those of a 16-bit product with
// float32 accumulation. Large arrays are split across the threads.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if (defined(__F16C__) || defined(__AVX2__)) && !defined(__CUDA_ARCH__)
#include <immintrin.h>
#endif

#include "typeflow/core/parallel.hpp"
#include "typeflow/core/dtype.hpp"
#include "typeflow/core/half.hpp"
#include "typeflow/precision/policy.hpp"
#include "typeflow/precision/weight_copies.hpp"

namespace typeflow::precision {

namespace detail {

// f(begin, end) over [0, n) in chunks of at most `chunk` elements, on the
// threads when n is large.
inline constexpr std::ptrdiff_t chunk = 4096;
template <class F>
void in_chunks(std::size_t n, F f) {
  const auto chunks = static_cast<std::ptrdiff_t>((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static) if (n >= static_cast<std::size_t>(typeflow::parallel_threshold))
  for (std::ptrdiff_t c = 0; c < chunks; ++c) {
    const std::size_t begin = static_cast<std::size_t>(c * chunk);
    const std::size_t end = begin + chunk < n ? begin + chunk : n;
    f(begin, end);
  }
}

// in and out are the same array or do not overlap.
inline void round_to_f16(const float* in, float* out, std::size_t n) noexcept {
  std::size_t i = 0;
#if defined(__F16C__) && !defined(__CUDA_ARCH__)
  for (const std::size_t end = n - n % 8; i < end; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = static_cast<float>(f16(in[i]));
}

inline void round_to_bf16(const float* in, float* out, std::size_t n) noexcept {
  // The same rule as bf16(float): ties to even on the top 16 bits, NaN kept
  // (quietened). Integer operations only, which the compiler vectorises.
  const auto* from = reinterpret_cast<const std::uint32_t*>(in);
  auto* bits = reinterpret_cast<std::uint32_t*>(out);
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = from[i];
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    bits[i] = nan ? ((u | 0x00400000u) & 0xffff0000u) : rounded;
  }
}

}  // namespace detail

// f(block, begin, length) over [0, n) in blocks of at most 4096 elements,
// where block holds stored[begin, begin + length) converted to float32 in one
// vector pass: element-wise layers work on 16-bit storage through it (a
// conversion per element would keep the compiler from vectorising the loop).
template <class Dtype, class F>
void for_each_block_as_float(const typename Dtype::value_type* stored, std::size_t n, F f) {
  detail::in_chunks(n, [&](std::size_t begin, std::size_t end) {
    alignas(64) float block[detail::chunk];
    convert(stored + begin, block, end - begin);
    f(block, begin, end - begin);
  });
}

// out[i] = in[i] rounded to Dtype; in and out are the same array or do not overlap.
template <class Dtype>
void round_into(const float* in, float* out, std::size_t n) {
  if constexpr (std::is_same_v<Dtype, float16>)
    detail::in_chunks(n, [=](std::size_t b, std::size_t e) { detail::round_to_f16(in + b, out + b, e - b); });
  else if constexpr (std::is_same_v<Dtype, bfloat16>)
    detail::in_chunks(n, [=](std::size_t b, std::size_t e) { detail::round_to_bf16(in + b, out + b, e - b); });
  else if constexpr (std::is_same_v<Dtype, float32>) {
    if (in != out) std::memcpy(out, in, n * sizeof(float));
  } else
    static_assert(std::is_same_v<Dtype, float32>, "round_into: Dtype is float32, float16 or bfloat16");
}

template <class Dtype>
void round_in_place(float* values, std::size_t n) {
  static_assert(!std::is_same_v<Dtype, float32>, "round_in_place: Dtype is float16 or bfloat16");
  round_into<Dtype>(values, values, n);
}

// round_in_place on the calling thread alone: for short rows inside a loop
// that is already split over the threads (float32: nothing to do).
template <class Dtype>
void round_row(float* values, std::size_t n) noexcept {
  if constexpr (std::is_same_v<Dtype, float16>) detail::round_to_f16(values, values, n);
  else if constexpr (std::is_same_v<Dtype, bfloat16>) detail::round_to_bf16(values, values, n);
  else static_assert(std::is_same_v<Dtype, float32>, "round_row: Dtype is float32, float16 or bfloat16");
}

// values[i] rounded to Dtype in place, and stored[i] the same value in Dtype's
// storage: one pass where a 16-bit product reads what float32 code also reads.
template <class Dtype>
void round_in_place_and_store(float* values, typename Dtype::value_type* stored, std::size_t n) {
  static_assert(!std::is_same_v<Dtype, float32>, "round_in_place_and_store: Dtype is float16 or bfloat16");
  detail::in_chunks(n, [=](std::size_t b, std::size_t e) {
    convert(values + b, stored + b, e - b);
    convert(stored + b, values + b, e - b);
  });
}

template <class Dtype>
void to_float(const typename Dtype::value_type* stored, float* out, std::size_t n) {
  if constexpr (std::is_same_v<Dtype, float32>) {
    if (stored != out) std::memcpy(out, stored, n * sizeof(float));
  } else {
    detail::in_chunks(n, [=](std::size_t b, std::size_t e) { convert(stored + b, out + b, e - b); });
  }
}

template <class Dtype>
void from_float(const float* values, typename Dtype::value_type* out, std::size_t n) {
  if constexpr (std::is_same_v<Dtype, float32>) {
    if (values != out) std::memcpy(out, values, n * sizeof(float));
  } else {
    detail::in_chunks(n, [=](std::size_t b, std::size_t e) { convert(values + b, out + b, e - b); });
  }
}

// Copy i of a layer's bf16 weight copies made current: converted from its
// float32 tensor, unless the weights did not change since (weight_copies.hpp).
inline void refresh(weight_copies& copies, std::size_t i) {
  if (!copies.stale(i)) return;
  const weight_copy& c = copies.entries()[i];
  from_float<bfloat16>(c.source, c.copy, c.count);
  copies.made(i);
}

}  // namespace typeflow::precision

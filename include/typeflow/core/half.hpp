// The 16-bit element types of mixed precision: f16 (IEEE binary16) and bf16
// (bfloat16, float32's top half). Storage only: no arithmetic; compute in
// float and convert at the edges.
//
// float -> 16 bits rounds to nearest, ties to even, as IEEE does: f16
// overflows to infinity from 65520 up and keeps its subnormals, bf16 keeps
// float's exponent range (float subnormals round to bf16 subnormals). 16 bits
// -> float is exact. NaN stays NaN with its sign and the top of its payload,
// made quiet (the quiet bit set) on the way to f16 and to bf16 and on the way
// from f16 (what F16C, AVX512-BF16 and the portable code all do), so a
// signalling f16 NaN comes back from float with 0x0200 set, a bf16 one with
// 0x0040. bf16 -> float is a shift and keeps a signalling NaN signalling.
//
// Every path gives the same bits (tests/unit/half_test.cpp compares them):
// F16C on the host where __F16C__ is defined (g++ -mf16c, -march=native on
// any AVX2 machine), AVX2 and AVX512-BF16 for the array conversions, cvt on
// a GPU, and the portable integer code in detail:: everywhere else (without
// -march, for instance; constant evaluation uses it too). No path reads the
// floating-point environment: flush-to-zero and denormals-are-zero (which
// oneDNN or a user may set) change nothing here.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "typeflow/core/host_device.hpp"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#if !defined(__CUDA_ARCH__) && (defined(__F16C__) || defined(__AVX2__) || defined(__AVX512BF16__))
#include <immintrin.h>
#endif

namespace typeflow {

namespace detail {

// NaNs in and out of 16 bits: made quiet, sign and the top of the payload
// kept (the hardware rule, which every path follows).
TYPEFLOW_HOST_DEVICE constexpr bool is_nan_bits(std::uint32_t u) noexcept { return (u & 0x7fffffffu) > 0x7f800000u; }
TYPEFLOW_HOST_DEVICE constexpr std::uint16_t f16_nan(std::uint32_t u) noexcept {
  return static_cast<std::uint16_t>(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu));
}
TYPEFLOW_HOST_DEVICE constexpr std::uint16_t bf16_nan(std::uint32_t u) noexcept {
  return static_cast<std::uint16_t>((u >> 16) | 0x40u);
}
TYPEFLOW_HOST_DEVICE constexpr float float_nan_from_f16(std::uint16_t h) noexcept {
  return std::bit_cast<float>(((std::uint32_t{h} & 0x8000u) << 16) | 0x7fc00000u | ((std::uint32_t{h} & 0x3ffu) << 13));
}

// The portable conversions, on the bits alone. Public to the tests, which
// compare them with the hardware paths over every pattern they sample.

TYPEFLOW_HOST_DEVICE constexpr std::uint16_t float_to_f16_portable(float x) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (is_nan_bits(u)) return f16_nan(u);
  std::uint32_t h = 0;  // below 2^-25 (half the smallest subnormal, 2^-24): zero
  if (a >= 0x477ff000u) {
    h = 0x7c00u;  // 65520 (halfway from 65504 to 2^16, even side up) and beyond: infinity
  } else if (a >= 0x38800000u) {
    // Normal: rebias the exponent (127 -> 15) and drop 13 bits, adding just
    // under half (plus the kept lsb, for ties to even); a carry out of the
    // fraction correctly bumps the exponent.
    h = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
  } else if (a >= 0x33000000u) {
    // Subnormal: the value in units of 2^-24 is the full significand (implicit
    // bit included) shifted right by 14 (2^-15 <= |x| < 2^-14) up to 24
    // (2^-25 <= |x| < 2^-24), rounded the same way. Rounding up out of the
    // largest subnormal gives 0x0400, the smallest normal, as it should.
    const std::uint32_t shift = 126u - (a >> 23);
    const std::uint32_t significand = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t below_half = (1u << (shift - 1)) - 1u;
    h = (significand + below_half + ((significand >> shift) & 1u)) >> shift;
  }
  return static_cast<std::uint16_t>(sign | h);
}

TYPEFLOW_HOST_DEVICE constexpr float f16_to_float_portable(std::uint16_t h) noexcept {
  const std::uint32_t sign = (std::uint32_t{h} & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t fraction = h & 0x3ffu;
  if (exponent == 0x1fu) return fraction != 0 ? float_nan_from_f16(h) : std::bit_cast<float>(sign | 0x7f800000u);
  if (exponent == 0) {
    // Zero or subnormal: fraction · 2^-24, a normal float, so exact whatever
    // the flush-to-zero setting.
    const float magnitude = static_cast<float>(fraction) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (fraction << 13));
}

TYPEFLOW_HOST_DEVICE constexpr std::uint16_t float_to_bf16_portable(float x) noexcept {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if (is_nan_bits(u)) return bf16_nan(u);
  // Ties to even on the top 16 bits. Infinities pass unchanged, the largest
  // floats carry into infinity, subnormals round like any other value.
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

TYPEFLOW_HOST_DEVICE constexpr float bf16_to_float_portable(std::uint16_t b) noexcept {
  return std::bit_cast<float>(std::uint32_t{b} << 16);
}

// The scalar conversions, by the fastest path the target has. The GPU's cvt
// instructions write the canonical NaN 0x7fff (sign and payload lost), so
// there NaNs are picked out, by an integer test that -ffast-math and
// --use_fast_math cannot drop, and given the rule above.

TYPEFLOW_HOST_DEVICE constexpr std::uint16_t float_to_f16_bits(float x) noexcept {
  if (!std::is_constant_evaluated()) {
#if defined(__CUDA_ARCH__)
    const std::uint16_t hardware = static_cast<__half_raw>(__float2half_rn(x)).x;
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    return is_nan_bits(u) ? f16_nan(u) : hardware;
#elif defined(__F16C__)
    return static_cast<std::uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
#endif
  }
  return float_to_f16_portable(x);
}

TYPEFLOW_HOST_DEVICE constexpr float f16_bits_to_float(std::uint16_t h) noexcept {
  if (!std::is_constant_evaluated()) {
#if defined(__CUDA_ARCH__)
    __half_raw raw;
    raw.x = h;
    const float hardware = __half2float(__half(raw));
    return (h & 0x7fffu) > 0x7c00u ? float_nan_from_f16(h) : hardware;
#elif defined(__F16C__)
    return _cvtsh_ss(h);
#endif
  }
  return f16_to_float_portable(h);
}

// bf16 has no scalar fast path on the host: the portable code is four integer
// operations, and AVX512-BF16's vcvtneps2bf16 flushes subnormal inputs to
// zero, which would need fixing up anyway.
TYPEFLOW_HOST_DEVICE constexpr std::uint16_t float_to_bf16_bits(float x) noexcept {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (!std::is_constant_evaluated()) {
    const std::uint16_t hardware = static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x;
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    return is_nan_bits(u) ? bf16_nan(u) : hardware;
  }
#endif
  return float_to_bf16_portable(x);
}

}  // namespace detail

// Trivially copyable 2-byte storage, like float: default construction leaves
// the bits unset. Conversions are explicit both ways, so that no arithmetic
// happens in 16 bits by accident. A double argument is rounded to float first.
class f16 {
 public:
  f16() = default;
  TYPEFLOW_HOST_DEVICE constexpr explicit f16(float x) noexcept : bits_(detail::float_to_f16_bits(x)) {}
  TYPEFLOW_HOST_DEVICE constexpr explicit operator float() const noexcept { return detail::f16_bits_to_float(bits_); }

  TYPEFLOW_HOST_DEVICE static constexpr f16 from_bits(std::uint16_t bits) noexcept { return f16(bits, raw_tag{}); }
  TYPEFLOW_HOST_DEVICE constexpr std::uint16_t bits() const noexcept { return bits_; }

#if defined(__CUDACC__)
  // Same bits as CUDA's __half, both ways.
  TYPEFLOW_HOST_DEVICE explicit f16(__half h) noexcept : bits_(static_cast<__half_raw>(h).x) {}
  TYPEFLOW_HOST_DEVICE explicit operator __half() const noexcept {
    __half_raw raw;
    raw.x = bits_;
    return __half(raw);
  }
#endif

 private:
  struct raw_tag {};
  TYPEFLOW_HOST_DEVICE constexpr f16(std::uint16_t bits, raw_tag) noexcept : bits_(bits) {}
  std::uint16_t bits_;
};

class bf16 {
 public:
  bf16() = default;
  TYPEFLOW_HOST_DEVICE constexpr explicit bf16(float x) noexcept : bits_(detail::float_to_bf16_bits(x)) {}
  TYPEFLOW_HOST_DEVICE constexpr explicit operator float() const noexcept {
    return detail::bf16_to_float_portable(bits_);  // a shift: no instruction does better
  }

  TYPEFLOW_HOST_DEVICE static constexpr bf16 from_bits(std::uint16_t bits) noexcept { return bf16(bits, raw_tag{}); }
  TYPEFLOW_HOST_DEVICE constexpr std::uint16_t bits() const noexcept { return bits_; }

#if defined(__CUDACC__)
  // Same bits as CUDA's __nv_bfloat16, both ways.
  TYPEFLOW_HOST_DEVICE explicit bf16(__nv_bfloat16 b) noexcept : bits_(static_cast<__nv_bfloat16_raw>(b).x) {}
  TYPEFLOW_HOST_DEVICE explicit operator __nv_bfloat16() const noexcept {
    __nv_bfloat16_raw raw;
    raw.x = bits_;
    return __nv_bfloat16(raw);
  }
#endif

 private:
  struct raw_tag {};
  TYPEFLOW_HOST_DEVICE constexpr bf16(std::uint16_t bits, raw_tag) noexcept : bits_(bits) {}
  std::uint16_t bits_;
};

static_assert(sizeof(f16) == 2 && alignof(f16) == 2 && std::is_trivially_copyable_v<f16>);
static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2 && std::is_trivially_copyable_v<bf16>);
#if defined(__CUDACC__)
// Buffers of one may be handed to kernels as buffers of the other.
static_assert(sizeof(f16) == sizeof(__half) && alignof(f16) == alignof(__half));
static_assert(sizeof(bf16) == sizeof(__nv_bfloat16) && alignof(bf16) == alignof(__nv_bfloat16));
#endif

// Array conversions on the host, n elements, vectorised where the target
// allows; the tail (n not a multiple of the vector width) goes element by
// element through the scalar conversions above, which give the same bits.
// Input and output must not overlap.

inline void convert(const float* in, f16* out, std::size_t n) noexcept {
  std::size_t i = 0;
#if defined(__F16C__) && !defined(__CUDA_ARCH__)
  for (const std::size_t end = n - n % 8; i < end; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
#endif
  for (; i < n; ++i) out[i] = f16(in[i]);
}

inline void convert(const f16* in, float* out, std::size_t n) noexcept {
  std::size_t i = 0;
#if defined(__F16C__) && !defined(__CUDA_ARCH__)
  for (const std::size_t end = n - n % 8; i < end; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

inline void convert(const float* in, bf16* out, std::size_t n) noexcept {
  std::size_t i = 0;
#if defined(__AVX512BF16__) && defined(__AVX512F__) && !defined(__CUDA_ARCH__)
  // vcvtneps2bf16 rounds like the portable code but flushes subnormal inputs
  // to zero; a block holding one (rare) goes through the scalar code instead.
  const __m512i magnitude_mask_512 = _mm512_set1_epi32(0x7fffffff);
  const __m512i largest_subnormal = _mm512_set1_epi32(0x007fffff);
  for (const std::size_t end = n - n % 16; i < end; i += 16) {
    const __m512 x = _mm512_loadu_ps(in + i);
    const __m512i magnitude = _mm512_and_si512(_mm512_castps_si512(x), magnitude_mask_512);
    // magnitude - 1 < 0x7fffff (unsigned) exactly when magnitude is in [1, 0x7fffff].
    const __mmask16 subnormal =
        _mm512_cmplt_epu32_mask(_mm512_sub_epi32(magnitude, _mm512_set1_epi32(1)), largest_subnormal);
    if (subnormal != 0) {
      for (std::size_t j = i; j < i + 16; ++j) out[j] = bf16(in[j]);
      continue;
    }
    const __m256bh b = _mm512_cvtneps_pbh(x);
    std::memcpy(static_cast<void*>(out + i), &b, sizeof b);  // __m256bh's element type differs across compilers
  }
#endif
#if defined(__AVX2__) && !defined(__CUDA_ARCH__)
  // The portable rounding, 8 lanes at a time.
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i below_half = _mm256_set1_epi32(0x7fff);
  const __m256i magnitude_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i infinity = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  for (const std::size_t end = n - n % 8; i < end; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    const __m256i top = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(top, one);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(below_half, lsb)), 16);
    // Magnitudes are below 2^31, so the signed comparison is the unsigned one.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, magnitude_mask), infinity);
    const __m256i result = _mm256_blendv_epi8(rounded, _mm256_or_si256(top, quiet), nan);
    // Each 32-bit lane holds at most 0xffff, so the saturating pack is a plain
    // narrowing; it packs within 128-bit halves, and the permute joins them.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(result, result), 0b1000);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
  }
#endif
  for (; i < n; ++i) out[i] = bf16(in[i]);
}

inline void convert(const bf16* in, float* out, std::size_t n) noexcept {
  std::size_t i = 0;
#if defined(__AVX2__) && !defined(__CUDA_ARCH__)
  for (const std::size_t end = n - n % 8; i < end; i += 8) {
    const __m256i widened = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(widened, 16));
  }
#endif
  for (; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

}  // namespace typeflow

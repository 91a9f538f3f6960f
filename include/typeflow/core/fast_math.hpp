// exp and erf in float32 as straight-line arithmetic, so that g++ vectorises
// the loops that call them (libm's expf and erff are opaque calls, one
// element at a time: exact gelu spent a quarter of a small GPT's training
// step in erff). The same code runs on a GPU. Accuracy over all floats
// (tests/unit/fast_math_test.cpp samples them): fast_exp within 3 ulp of
// std::exp on [-87.3, 88.7], 0 below and +inf above; fast_erf within 6e-7
// (absolute) of erf; fast_tanh within 5 ulp of tanh (GPT-2's tanh GELU spent
// an eighth of its step in libm's tanhf, which calls expm1f); NaN stays NaN.
#pragma once

#include <bit>
#include <cstdint>

#include "typeflow/core/host_device.hpp"

namespace typeflow {

// e^x = 2^n · e^r with n = round(x / ln 2) and |r| <= ln 2 / 2; e^r by its
// degree-6 Taylor polynomial (the remainder is below 2^-25 there), 2^n built
// in the exponent bits. Every branch is a select between computed values,
// which g++ turns into vector blends when it may assume that comparisons do
// not trap (-fno-trapping-math, which typeflow's own targets use).
TYPEFLOW_HOST_DEVICE float fast_exp(float x) {
  const bool overflow = x > 88.72283f;
  const bool underflow = x < -87.33654f;
  const bool nan = x != x;
  float clamped = nan ? 0.f : x;  // NaN must not reach the float-to-int conversion below
  clamped = underflow ? -87.33654f : clamped;
  clamped = overflow ? 88.72283f : clamped;
  // Round to nearest by adding and subtracting 1.5 * 2^23 (exact for
  // |t| < 2^22): unlike floorf, which g++ calls out of line without
  // -ffast-math, this keeps the loop vectorisable.
  const float t = clamped * 1.44269504088896341f;
  const float n = (t + 12582912.f) - 12582912.f;
  // ln 2 in two parts, so r keeps its low bits (Cody and Waite).
  const float r = (clamped - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;
  float p = 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  // n lies in [-126, 128]; 2^n is built as 2^half · 2^(n - half) so that both
  // exponents stay valid at the ends.
  const std::int32_t k = static_cast<std::int32_t>(n);
  const std::int32_t half = k >> 1;
  const float scale_a = std::bit_cast<float>((half + 127) << 23);
  const float scale_b = std::bit_cast<float>((k - half + 127) << 23);
  float result = p * scale_a * scale_b;
  result = underflow ? 0.f : result;
  result = overflow ? __builtin_inff() : result;
  return nan ? x : result;
}

// erf by Abramowitz and Stegun's 7.1.26 for |x|: erf(x) = 1 - t·P(t)·e^(-x²)
// with t = 1 / (1 + p|x|), then the sign of x. The e^(-x²) it computes on
// the way goes to gaussian: gelu's derivative needs it too, and a second
// fast_exp was a third of that loop's time.
TYPEFLOW_HOST_DEVICE float fast_erf(float x, float& gaussian) {
  const float a = __builtin_fabsf(x);
  const float t = 1.f / (1.f + 0.3275911f * a);
  float poly = 1.061405429f;
  poly = poly * t - 1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t - 0.284496736f;
  poly = poly * t + 0.254829592f;
  gaussian = fast_exp(-a * a);
  const float y = 1.f - poly * t * gaussian;
  return __builtin_copysignf(y, x);
}
TYPEFLOW_HOST_DEVICE float fast_erf(float x) {
  float gaussian;
  return fast_erf(x, gaussian);
}

// tanh as x · P(x²) / Q(x²), the rational approximation Eigen and XLA use
// (degree 13 over 6), x itself below 4e-4, where x - x³/3 rounds to x, and
// exactly ±1 from ±7.90531 on, where tanh rounds to ±1 in float. The
// quotient alone lands an ulp or so short of 1 there when the compiler fuses
// the polynomials' multiply-adds (nvcc does), and gelu_tanh's derivative
// multiplies 1 - t² by x³: at x = 100 four ulps became 0.026 (seen on an
// H200, 2026-12-04).
TYPEFLOW_HOST_DEVICE float fast_tanh(float x) {
  const bool tiny = __builtin_fabsf(x) < 0.0004f;
  constexpr float limit = 7.90531110763549805f;
  const bool saturated = __builtin_fabsf(x) >= limit;  // false for NaN
  float c = x > limit ? limit : x;  // NaN passes both selects and stays NaN
  c = c < -limit ? -limit : c;
  const float x2 = c * c;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 - 8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  float result = c * p / q;
  result = saturated ? (x > 0.f ? 1.f : -1.f) : result;
  return tiny ? x : result;
}

}  // namespace typeflow

// fast_exp and fast_erf (core/fast_math.hpp) against libm, over a sample of
// every float's bit pattern.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include <typeflow/core/fast_math.hpp>

TEST_CASE("fast_exp stays within 3 ulp of std::exp, and fast_erf within 6e-7 of erf") {
  double worst_ulp = 0, worst_erf = 0;
  float worst_exp_at = 0, worst_erf_at = 0;
  std::uint64_t checked = 0;
  for (std::uint64_t pattern = 0; pattern < (std::uint64_t{1} << 32); pattern += 9973) {
    const auto bits = static_cast<std::uint32_t>(pattern);
    float x;
    std::memcpy(&x, &bits, sizeof x);
    if (std::isnan(x)) continue;
    ++checked;
    if (x >= -87.3f && x <= 88.7f) {
      const float want = std::exp(x);
      const double ulp = std::nextafter(want, std::numeric_limits<float>::infinity()) - want;
      const double error = std::fabs(static_cast<double>(typeflow::fast_exp(x)) - want) / ulp;
      if (error > worst_ulp) worst_ulp = error, worst_exp_at = x;
    }
    const double error = std::fabs(static_cast<double>(typeflow::fast_erf(x)) - std::erf(static_cast<double>(x)));
    if (error > worst_erf) worst_erf = error, worst_erf_at = x;
  }
  INFO(checked << " floats; exp: " << worst_ulp << " ulp at " << worst_exp_at << "; erf: " << worst_erf << " at "
                << worst_erf_at);
  CHECK(checked > 400'000);
  CHECK(worst_ulp <= 3.0);
  CHECK(worst_erf <= 6e-7);
}

TEST_CASE("fast_exp's edges: overflow to infinity, underflow to zero, NaN kept") {
  CHECK(std::isinf(typeflow::fast_exp(89.f)));
  CHECK(std::isinf(typeflow::fast_exp(std::numeric_limits<float>::infinity())));
  CHECK(typeflow::fast_exp(-88.f) == 0.f);
  CHECK(typeflow::fast_exp(-std::numeric_limits<float>::infinity()) == 0.f);
  CHECK(std::isnan(typeflow::fast_exp(std::numeric_limits<float>::quiet_NaN())));
  CHECK(typeflow::fast_exp(0.f) == 1.f);
  CHECK(typeflow::fast_erf(0.f) == 0.f);
  CHECK(typeflow::fast_erf(10.f) == doctest::Approx(1.0).epsilon(1e-7));
  CHECK(typeflow::fast_erf(-10.f) == doctest::Approx(-1.0).epsilon(1e-7));
}

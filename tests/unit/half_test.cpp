// f16 and bf16 (core/half.hpp): every 16-bit pattern through float and back;
// float -> 16 bits against a reference written here (the nearest value, ties
// to even, by comparing neighbours) over a sample of float patterns; the
// portable code against the hardware paths bit for bit; the array
// conversions against the scalar ones.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <typeflow/core/dtype.hpp>
#include <typeflow/core/half.hpp>

namespace {

// The sampled float patterns: every 997th of the 2^32, then every setting of
// bits 13..31 with the low 13 bits at the rounding edges of f16 (bit 12 is
// its half-ulp for normal results; bits 13 and up, swept fully, hold the ties
// of subnormal results and of bf16).
template <class Check>
std::uint64_t for_each_sampled_float(Check check) {
  std::uint64_t count = 0;
  for (std::uint64_t pattern = 0; pattern < (std::uint64_t{1} << 32); pattern += 997, ++count)
    check(std::bit_cast<float>(static_cast<std::uint32_t>(pattern)));
  for (std::uint32_t high = 0; high < (1u << 19); ++high)
    for (const std::uint32_t low : {0x0000u, 0x0001u, 0x0fffu, 0x1000u, 0x1001u}) {
      check(std::bit_cast<float>(high << 13 | low));
      ++count;
    }
  return count;
}

// The value of a 16-bit pattern's magnitude (sign dropped), decoded here with
// ldexp rather than by the header; the all-ones exponent with a zero fraction
// reads as the next power of two (2^16 for f16, 2^128 for bf16), which is
// where IEEE rounding puts the overflow boundary.
double f16_magnitude(std::uint32_t m) {
  const int exponent = static_cast<int>(m >> 10), fraction = static_cast<int>(m & 0x3ff);
  return exponent == 0 ? std::ldexp(fraction, -24) : std::ldexp(1024 + fraction, exponent - 25);
}
double bf16_magnitude(std::uint32_t m) {
  const int exponent = static_cast<int>(m >> 7), fraction = static_cast<int>(m & 0x7f);
  return exponent == 0 ? std::ldexp(fraction, -133) : std::ldexp(128 + fraction, exponent - 134);
}

// Whether `bits` is x rounded to nearest, ties to even: same sign, and no
// neighbouring magnitude (one step down, one step up, up to infinity's
// pattern) closer, or as close and even. inf_bits is infinity's magnitude.
template <class Magnitude>
bool is_nearest_even(float x, std::uint16_t bits, std::uint32_t inf_bits, Magnitude magnitude) {
  if (std::isnan(x)) return (bits & inf_bits) == inf_bits && (bits & ~0x8000u & ~inf_bits) != 0 &&
                            (bits >> 15) == (std::bit_cast<std::uint32_t>(x) >> 31);
  if ((bits >> 15) != (std::bit_cast<std::uint32_t>(x) >> 31)) return false;
  const std::uint32_t m = bits & 0x7fffu;
  if (std::isinf(x)) return m == inf_bits;
  if (m > inf_bits) return false;
  const double target = std::fabs(static_cast<double>(x));
  const double distance = std::fabs(target - magnitude(m));
  for (const std::uint32_t neighbour : {m - 1, m + 1}) {
    if (neighbour > inf_bits) continue;  // below zero (wrapped round) or above infinity
    const double other = std::fabs(target - magnitude(neighbour));
    if (other < distance || (other == distance && (m & 1) != 0)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("f16 and bf16 are 2-byte trivially copyable storage with dtype tags") {
  static_assert(sizeof(typeflow::f16) == 2 && std::is_trivially_copyable_v<typeflow::f16>);
  static_assert(sizeof(typeflow::bf16) == 2 && std::is_trivially_copyable_v<typeflow::bf16>);
  static_assert(!std::is_convertible_v<float, typeflow::f16> && !std::is_convertible_v<typeflow::f16, float>);
  static_assert(!std::is_convertible_v<float, typeflow::bf16> && !std::is_convertible_v<typeflow::bf16, float>);
  static_assert(typeflow::dtype<typeflow::float16> && typeflow::dtype<typeflow::bfloat16>);
  static_assert(std::is_same_v<typeflow::float16::value_type, typeflow::f16>);
  static_assert(std::is_same_v<typeflow::dtype_of_t<typeflow::bf16>, typeflow::bfloat16>);
  static_assert(typeflow::float16::safetensors_name == "F16" && typeflow::bfloat16::safetensors_name == "BF16");
  // Constant evaluation takes the portable path.
  static_assert(typeflow::f16(1.f).bits() == 0x3c00 && typeflow::bf16(1.f).bits() == 0x3f80);
  static_assert(static_cast<float>(typeflow::f16::from_bits(0x0001)) == 0x1p-24f);
  static_assert(typeflow::f16(65520.f).bits() == 0x7c00 && typeflow::bf16(-0x1p-133f).bits() == 0x8001);
}

TEST_CASE("every f16 and bf16 pattern goes to float and back unchanged (NaNs made quiet)") {
  std::uint32_t checked = 0;
  for (std::uint32_t p = 0; p < 0x10000; ++p) {
    const auto bits = static_cast<std::uint16_t>(p);
    const bool f16_nan = (bits & 0x7c00) == 0x7c00 && (bits & 0x03ff) != 0;
    const bool bf16_nan = (bits & 0x7f80) == 0x7f80 && (bits & 0x007f) != 0;

    const float h = static_cast<float>(typeflow::f16::from_bits(bits));
    const float h_portable = typeflow::detail::f16_to_float_portable(bits);
    CHECK(std::bit_cast<std::uint32_t>(h) == std::bit_cast<std::uint32_t>(h_portable));
    CHECK(std::isnan(h) == f16_nan);
    const bool f16_inf = (bits & 0x7fff) == 0x7c00;
    CHECK(std::isinf(h) == f16_inf);
    if (!f16_nan && !f16_inf) CHECK(static_cast<double>(h) == std::copysign(f16_magnitude(bits & 0x7fff), bits & 0x8000 ? -1. : 1.));
    // Back: the same bits, a NaN with its quiet bit set (sign and payload kept).
    const std::uint16_t h_back = f16_nan ? bits | 0x0200 : bits;
    CHECK(typeflow::f16(h).bits() == h_back);
    CHECK(typeflow::detail::float_to_f16_portable(h) == h_back);

    const float b = static_cast<float>(typeflow::bf16::from_bits(bits));
    CHECK(std::isnan(b) == bf16_nan);
    const bool bf16_inf = (bits & 0x7fff) == 0x7f80;
    CHECK(std::isinf(b) == bf16_inf);
    if (!bf16_nan && !bf16_inf) CHECK(static_cast<double>(b) == std::copysign(bf16_magnitude(bits & 0x7fff), bits & 0x8000 ? -1. : 1.));
    CHECK(typeflow::bf16(b).bits() == (bf16_nan ? bits | 0x0040 : bits));
    ++checked;
  }
  CHECK(checked == 65536);
}

TEST_CASE("float to f16 and bf16 rounds to nearest even on every path") {
#if defined(__F16C__)
  MESSAGE("f16: F16C compared with the portable code");
#else
  MESSAGE("f16: no F16C here, the portable code alone");
#endif
  std::uint64_t f16_wrong = 0, bf16_wrong = 0, paths_differ = 0;
  float f16_wrong_at = 0, bf16_wrong_at = 0, paths_differ_at = 0;
  // The array conversions (F16C, AVX2 or AVX512-BF16 where compiled in) see
  // every sampled float too, in blocks of an odd length.
  std::vector<float> block;
  std::vector<typeflow::f16> block_f16(4093);
  std::vector<typeflow::bf16> block_bf16(4093);
  const auto check_block = [&] {
    typeflow::convert(block.data(), block_f16.data(), block.size());
    typeflow::convert(block.data(), block_bf16.data(), block.size());
    for (std::size_t i = 0; i < block.size(); ++i)
      if (block_f16[i].bits() != typeflow::f16(block[i]).bits() || block_bf16[i].bits() != typeflow::bf16(block[i]).bits())
        ++paths_differ, paths_differ_at = block[i];
    block.clear();
  };
  const std::uint64_t checked = for_each_sampled_float([&](float x) {
    const std::uint16_t h = typeflow::f16(x).bits();
    if (h != typeflow::detail::float_to_f16_portable(x)) ++paths_differ, paths_differ_at = x;
    if (!is_nearest_even(x, h, 0x7c00, f16_magnitude)) ++f16_wrong, f16_wrong_at = x;
    const std::uint16_t b = typeflow::bf16(x).bits();
    if (b != typeflow::detail::float_to_bf16_portable(x)) ++paths_differ, paths_differ_at = x;
    if (!is_nearest_even(x, b, 0x7f80, bf16_magnitude)) ++bf16_wrong, bf16_wrong_at = x;
    block.push_back(x);
    if (block.size() == block_f16.size()) check_block();
  });
  check_block();
  INFO(checked << " floats; wrong f16: " << f16_wrong << " (last at " << f16_wrong_at << "), wrong bf16: "
                << bf16_wrong << " (last at " << bf16_wrong_at << "), paths differ: " << paths_differ << " (last at "
                << paths_differ_at << ")");
  CHECK(checked > 6'900'000);
  CHECK(f16_wrong == 0);
  CHECK(bf16_wrong == 0);
  CHECK(paths_differ == 0);
}

TEST_CASE("float to f16 and bf16 at the edges") {
  const auto f16_bits = [](float x) {
    const std::uint16_t h = typeflow::f16(x).bits();
    CHECK(h == typeflow::detail::float_to_f16_portable(x));
    return h;
  };
  const auto bf16_bits = [](float x) { return typeflow::bf16(x).bits(); };
  const float inf = std::numeric_limits<float>::infinity();

  CHECK(f16_bits(65504.f) == 0x7bff);                        // largest finite
  CHECK(f16_bits(std::nextafter(65520.f, 0.f)) == 0x7bff);  // 65519.996
  CHECK(f16_bits(65520.f) == 0x7c00);                        // the tie goes to the even side: infinity
  CHECK(f16_bits(-65520.f) == 0xfc00);
  CHECK(f16_bits(1e10f) == 0x7c00);
  CHECK(f16_bits(std::numeric_limits<float>::max()) == 0x7c00);
  CHECK(f16_bits(inf) == 0x7c00);
  CHECK(f16_bits(-inf) == 0xfc00);
  CHECK(f16_bits(0.f) == 0x0000);
  CHECK(f16_bits(-0.f) == 0x8000);
  CHECK(f16_bits(0x1p-24f) == 0x0001);                            // smallest subnormal
  CHECK(f16_bits(0x1p-25f) == 0x0000);                            // half of it: tie to even, zero
  CHECK(f16_bits(std::nextafter(0x1p-25f, 1.f)) == 0x0001);       // just above the tie
  CHECK(f16_bits(-0x1p-25f) == 0x8000);                           // negative ties keep their sign
  CHECK(f16_bits(0x3p-25f) == 0x0002);                            // 1.5 subnormal steps: tie up to even 2
  CHECK(f16_bits(0x5p-25f) == 0x0002);                            // 2.5: tie down to even 2
  CHECK(f16_bits(0x1p-14f - 0x1p-25f) == 0x0400);                 // largest subnormal + half: rounds into the normals
  CHECK(f16_bits(0x1p-14f) == 0x0400);                            // smallest normal
  CHECK(f16_bits(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(f16_bits(-std::numeric_limits<float>::denorm_min()) == 0x8000);
  CHECK(f16_bits(1.f + 0x1p-11f) == 0x3c00);                      // tie between 1 and 1 + 2^-10: even, 1
  CHECK(f16_bits(1.f + 0x3p-11f) == 0x3c02);                      // tie: even, 1 + 2^-9
  CHECK(f16_bits(2047.5f) == 0x6800);                             // tie between 2047 and 2048: even, 2048
  CHECK(f16_bits(std::numeric_limits<float>::quiet_NaN()) == 0x7e00);
  CHECK(f16_bits(-std::numeric_limits<float>::quiet_NaN()) == 0xfe00);
  CHECK(f16_bits(std::bit_cast<float>(0x7f800001u)) == 0x7e00);   // signalling, payload below f16's: quiet NaN
  CHECK(f16_bits(std::bit_cast<float>(0xffa02000u)) == 0xff01);   // signalling, payload kept, made quiet

  CHECK(f16_bits(65519.99f) == 0x7bff);

  // 16 bits to float: f16 NaNs come out quiet (F16C's rule), bf16's unchanged.
  CHECK(std::bit_cast<std::uint32_t>(typeflow::detail::f16_to_float_portable(0x7c01)) == 0x7fc02000u);
  CHECK(std::bit_cast<std::uint32_t>(typeflow::detail::f16_to_float_portable(0xfd55)) == 0xffeaa000u);
  CHECK(std::bit_cast<std::uint32_t>(static_cast<float>(typeflow::f16::from_bits(0xfd55))) == 0xffeaa000u);
  CHECK(std::bit_cast<std::uint32_t>(static_cast<float>(typeflow::bf16::from_bits(0x7f81))) == 0x7f810000u);

  CHECK(bf16_bits(1.f + 0x1p-8f) == 0x3f80);  // tie: even, 1
  CHECK(bf16_bits(1.f + 0x3p-8f) == 0x3f82);  // tie: even, up
  CHECK(bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(bf16_bits(std::bit_cast<float>(0x7f7f7fffu)) == 0x7f7f);  // just below the overflow tie
  CHECK(bf16_bits(std::bit_cast<float>(0x7f7f8000u)) == 0x7f80);  // the tie: even, infinity
  CHECK(bf16_bits(inf) == 0x7f80);
  CHECK(bf16_bits(-inf) == 0xff80);
  CHECK(bf16_bits(-0.f) == 0x8000);
  CHECK(bf16_bits(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(bf16_bits(std::bit_cast<float>(0x00008000u)) == 0x0000);  // subnormal tie: even, zero
  CHECK(bf16_bits(std::bit_cast<float>(0x00018000u)) == 0x0002);  // subnormal tie: even, up
  CHECK(bf16_bits(std::bit_cast<float>(0x807fffffu)) == 0x8080);  // largest subnormal rounds to the smallest normal
  CHECK(bf16_bits(std::numeric_limits<float>::quiet_NaN()) == 0x7fc0);
  CHECK(bf16_bits(std::bit_cast<float>(0xff800001u)) == 0xffc0);  // signalling: quiet, sign kept
}

TEST_CASE("array conversions give the scalar conversions' bits") {
  // Random bit patterns (NaNs, infinities and subnormals among them) and a
  // few chosen ones, at lengths around the vector widths and odd offsets.
  std::mt19937 rng(20240611);
  std::vector<float> source(1100);
  for (auto& x : source) x = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
  for (std::size_t i = 0; i < source.size(); i += 37) source[i] = std::bit_cast<float>(static_cast<std::uint32_t>(rng()) & 0x807fffffu);
  for (std::size_t i = 5; i < source.size(); i += 41) source[i] = static_cast<float>(static_cast<int>(rng() % 200001) - 100000) * 0.7f;
  source[3] = 65520.f, source[4] = -0.f, source[10] = std::numeric_limits<float>::quiet_NaN(), source[11] = 0x1p-25f;

  std::vector<typeflow::f16> halves(source.size());
  std::vector<typeflow::bf16> bhalves(source.size());
  std::vector<float> back(source.size());
  std::size_t mismatches = 0;
  for (const std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
    for (std::size_t n = 0; n + offset <= source.size(); n += (n < 40 ? 1 : 97)) {
      const float* in = source.data() + offset;
      typeflow::convert(in, halves.data(), n);
      typeflow::convert(in, bhalves.data(), n);
      for (std::size_t i = 0; i < n; ++i) {
        mismatches += halves[i].bits() != typeflow::f16(in[i]).bits();
        mismatches += bhalves[i].bits() != typeflow::bf16(in[i]).bits();
      }
      typeflow::convert(halves.data(), back.data(), n);
      for (std::size_t i = 0; i < n; ++i)
        mismatches += std::bit_cast<std::uint32_t>(back[i]) != std::bit_cast<std::uint32_t>(static_cast<float>(halves[i]));
      typeflow::convert(bhalves.data(), back.data(), n);
      for (std::size_t i = 0; i < n; ++i)
        mismatches += std::bit_cast<std::uint32_t>(back[i]) != std::bit_cast<std::uint32_t>(static_cast<float>(bhalves[i]));
    }
  }
  CHECK(mismatches == 0);

  // Every 16-bit pattern, 65,536 plus a ragged tail, to float in one call.
  std::vector<typeflow::f16> all_halves;
  std::vector<typeflow::bf16> all_bhalves;
  for (std::uint32_t p = 0; p < 0x10000 + 5; ++p) {
    all_halves.push_back(typeflow::f16::from_bits(static_cast<std::uint16_t>(p)));
    all_bhalves.push_back(typeflow::bf16::from_bits(static_cast<std::uint16_t>(p)));
  }
  std::vector<float> floats(all_halves.size());
  std::size_t all_mismatches = 0;
  typeflow::convert(all_halves.data(), floats.data(), floats.size());
  for (std::size_t i = 0; i < floats.size(); ++i)
    all_mismatches += std::bit_cast<std::uint32_t>(floats[i]) != std::bit_cast<std::uint32_t>(static_cast<float>(all_halves[i]));
  typeflow::convert(all_bhalves.data(), floats.data(), floats.size());
  for (std::size_t i = 0; i < floats.size(); ++i)
    all_mismatches += std::bit_cast<std::uint32_t>(floats[i]) != std::bit_cast<std::uint32_t>(static_cast<float>(all_bhalves[i]));
  CHECK(all_mismatches == 0);
}

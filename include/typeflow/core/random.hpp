// Philox4x32-10: a counter-based random generator (Salmon et al., SC'11).
//
// Each value is a pure function of (key, counter), so initializers and
// dropout masks are reproducible bit for bit across runs, thread counts and
// backends: element i of step s draws from counter (i, s), no shared state.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "typeflow/core/host_device.hpp"

namespace typeflow {

struct philox4x32 {
  std::uint32_t key0, key1;

  TYPEFLOW_HOST_DEVICE static void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi,
                                           std::uint32_t& lo) {
    const std::uint64_t product = static_cast<std::uint64_t>(a) * b;
    hi = static_cast<std::uint32_t>(product >> 32);
    lo = static_cast<std::uint32_t>(product);
  }

  // Four 32-bit random words for the 128-bit counter (c0, c1, c2, c3).
  TYPEFLOW_HOST_DEVICE void generate(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2,
                                     std::uint32_t c3, std::uint32_t out[4]) const {
    std::uint32_t k0 = key0, k1 = key1;
    for (int round = 0; round < 10; ++round) {
      std::uint32_t hi0, lo0, hi1, lo1;
      mulhilo(0xD2511F53u, c0, hi0, lo0);
      mulhilo(0xCD9E8D57u, c2, hi1, lo1);
      const std::uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
      c0 = n0, c1 = n1, c2 = n2, c3 = n3;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
  }
};

// A uniform float in [0, 1) from 24 random bits.
TYPEFLOW_HOST_DEVICE float uniform_from_bits(std::uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// A stream of random numbers addressed by (seed, stream id, index): the same
// triple always gives the same value.
struct random_stream {
  std::uint64_t seed;
  std::uint64_t stream;

  TYPEFLOW_HOST_DEVICE void block(std::uint64_t index, std::uint32_t out[4]) const {
    const philox4x32 gen{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
    gen.generate(static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
                 static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32), out);
  }
  // Uniform in [0, 1) for element i.
  TYPEFLOW_HOST_DEVICE float uniform(std::uint64_t i) const {
    std::uint32_t words[4];
    block(i / 4, words);
    return uniform_from_bits(words[i % 4]);
  }
  // Standard normal for element i (Box-Muller on a pair of words).
  TYPEFLOW_HOST_DEVICE float normal(std::uint64_t i) const {
    std::uint32_t words[4];
    block(i / 2, words);
    const int pair = static_cast<int>(i % 2) * 2;
    const float u1 = (static_cast<float>(words[pair] >> 8) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
    const float u2 = uniform_from_bits(words[pair + 1]);
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.283185307179586f * u2);
  }
};

// SplitMix64 (Steele, Lea & Flood): one step of its sequence from x, a
// bijection that scatters bits. Every seed typeflow derives goes through it.
constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Mixes a user seed with a salt so that different consumers (layers,
// parameters) draw independent streams from one model seed.
constexpr std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t salt) {
  return splitmix64(seed + 0x9E3779B97F4A7C15ull * salt);
}

}  // namespace typeflow

// The dropout mask as a function, for the CUDA kernels (plain C++, host and
// device): the same draw as layers/dropout.hpp makes on the CPU, bit for bit.
//
//   stream   random_stream{mix_seed(model seed, 0xD120 + layer salt), step}
//   element  i uses word i % 4 of Philox block i / 4
//   keep     when the word's top 24 bits >= ceil(rate * 2^24), which is
//            uniform(i) >= rate exactly (both sides are exact in double)
//   scale    1.f / (1.f - rate), in float, as the layer's constexpr
//
// Being counter-based, backward regenerates the mask instead of storing it.
#pragma once

#include <cmath>
#include <cstdint>

#include "typeflow/core/host_device.hpp"
#include "typeflow/core/random.hpp"

namespace typeflow {

struct dropout_mask {
  random_stream rng;
  std::uint32_t threshold = 0;  // keep when (word >> 8) >= threshold
  float scale = 1.f;            // applied to the kept elements

  TYPEFLOW_HOST_DEVICE bool keep_word(std::uint32_t word) const { return (word >> 8) >= threshold; }
  // The keep bits of elements 4 * block .. 4 * block + 3.
  TYPEFLOW_HOST_DEVICE void keep4(std::uint64_t block, bool keep[4]) const {
    std::uint32_t words[4];
    rng.block(block, words);
    for (int j = 0; j < 4; ++j) keep[j] = keep_word(words[j]);
  }
  TYPEFLOW_HOST_DEVICE bool keep(std::uint64_t i) const {
    std::uint32_t words[4];
    rng.block(i / 4, words);
    return keep_word(words[i % 4]);
  }
};

// causal_self_attention's mask over the weights of (sample, head) pair p:
// weight (i, j) is element (p T + i) T + j, as the CPU layer draws it
// (backend/cpu/attention.hpp); the Keep of core/attention_rows.hpp.
struct attention_keep {
  static constexpr bool active = true;
  dropout_mask mask;
  std::uint64_t first = 0;  // p T T
  int steps = 0;            // T
  float scale = 1.f;        // mask.scale
  TYPEFLOW_HOST_DEVICE bool operator()(int i, int j) const {
    return mask.keep(first + static_cast<std::uint64_t>(i) * static_cast<std::uint64_t>(steps) +
                     static_cast<std::uint64_t>(j));
  }
};

// The layer's seed: what dropout's executors pass to random_stream as
// `seed`; layer_salt is the executor's layer_io::salt.
constexpr std::uint64_t dropout_seed(std::uint64_t model_seed, std::uint64_t layer_salt) {
  return mix_seed(model_seed, 0xD120u + layer_salt);
}
// causal_self_attention's mask over its attention weights, likewise.
constexpr std::uint64_t attention_dropout_seed(std::uint64_t model_seed, std::uint64_t layer_salt) {
  return mix_seed(model_seed, 0xA77Eu + layer_salt);
}
inline std::uint32_t dropout_threshold(float rate) {
  return static_cast<std::uint32_t>(std::ceil(double{rate} * 16777216.0));
}
inline float dropout_scale(float rate) { return 1.f / (1.f - rate); }

// The mask of step `step` for a layer seeded with dropout_seed(...).
inline dropout_mask make_dropout_mask(std::uint64_t layer_seed, std::uint64_t step, float rate) {
  return {random_stream{layer_seed, step}, dropout_threshold(rate), dropout_scale(rate)};
}

}  // namespace typeflow

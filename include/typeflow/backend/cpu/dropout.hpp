// dropout on the CPU: the keep mask drawn from the counter-based generator
// into the workspace (a byte per element), then applied in a second,
// vectorised pass; backward applies the kept mask to the gradient in place.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "typeflow/core/parallel.hpp"
#include "typeflow/core/random.hpp"
#include "typeflow/layers/dropout.hpp"
#include "typeflow/layers/dropout_mask.hpp"
#include "typeflow/contract/executor.hpp"
#include "typeflow/precision/storage.hpp"

namespace typeflow {

template <float Rate, class Layer, int Batch>
class executor<dropout<Rate>, Layer, Batch, cpu> : public executor_defaults {
  using output_dtype = typename Layer::output_dtype;
  static constexpr std::ptrdiff_t count = static_cast<std::ptrdiff_t>(Batch * Layer::input_shape::size);
  using value = typename output_dtype::value_type;  // float, f16 or bf16
  static constexpr float scale = 1.f / (1.f - Rate);

 public:
  explicit executor(const layer_io<cpu>& io) : io_(io) {}

  void forward() {
    const value* in = reinterpret_cast<const value*>(io_.in);
    value* out = reinterpret_cast<value*>(io_.out);
    if (!io_.run->training || Rate == 0.f) {
      std::memcpy(out, in, sizeof(value) * count);
      return;
    }
    auto* keep = reinterpret_cast<std::uint8_t*>(io_.workspace);
    const random_stream rng{dropout_seed(io_.run->seed, io_.salt), io_.run->step};
    // keep when uniform >= Rate, i.e. when the top 24 bits >= ceil(Rate * 2^24).
    const auto threshold = static_cast<std::uint32_t>(std::ceil(double{Rate} * 16777216.0));
    constexpr std::ptrdiff_t blocks = count / 4, chunk = 256;
#pragma omp parallel for schedule(static) if (count >= typeflow::parallel_threshold)
    for (std::ptrdiff_t b0 = 0; b0 < blocks; b0 += chunk) {
      const std::ptrdiff_t b1 = b0 + chunk < blocks ? b0 + chunk : blocks;
      for (std::ptrdiff_t b = b0; b < b1; ++b) {
        std::uint32_t words[4];
        rng.block(static_cast<std::uint64_t>(b), words);
        for (int j = 0; j < 4; ++j) keep[b * 4 + j] = (words[j] >> 8) >= threshold;
      }
    }
    for (std::ptrdiff_t i = blocks * 4; i < count; ++i) keep[i] = rng.uniform(static_cast<std::uint64_t>(i)) >= Rate;
    // Then the mask applied: a second, vectorised pass.
    if constexpr (std::is_same_v<value, float>) {
      typeflow::parallel_for(count, [=](std::ptrdiff_t i) { out[i] = keep[i] ? in[i] * scale : 0.f; });
    } else {  // 16-bit storage: blocks converted to float32 and back
      precision::for_each_block_as_float<output_dtype>(in, count, [=](float* x, std::size_t begin, std::size_t length) {
        const std::uint8_t* k = keep + begin;
#pragma omp simd
        for (std::size_t j = 0; j < length; ++j) x[j] = k[j] ? x[j] * scale : 0.f;
        convert(x, out + begin, length);
      });
    }
  }

  void backward() {
    // Rate 0 wrote no mask: the gradient passes through (in place).
    if (!io_.d_in || Rate == 0.f) return;
    float* grad = io_.d_in;
    const auto* keep = reinterpret_cast<const std::uint8_t*>(io_.workspace);
    typeflow::parallel_for(count, [=](std::ptrdiff_t i) { grad[i] = keep[i] ? grad[i] * scale : 0.f; });
  }

 private:
  layer_io<cpu> io_;
};

}  // namespace typeflow

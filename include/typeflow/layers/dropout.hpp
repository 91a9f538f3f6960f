// dropout<Rate>: zeroes each element with probability Rate while training and
// scales the survivors by 1 / (1 - Rate) (inverted dropout), so evaluation
// and prediction pass the input through unchanged.
//
//   input (B, ...) -> output (B, ...), no parameters; keeps a byte mask per
//   element from forward to backward.
//
// It keeps its input's dtype (16-bit storage under a 16-bit policy).
//
// The mask of element i at step s is a pure function of (model seed, layer
// position, s, i), so a seeded run reproduces bit for bit.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "typeflow/backend/cpu/parallel.hpp"
#include "typeflow/core/random.hpp"
#include "typeflow/model/layer.hpp"
#include "typeflow/precision/storage.hpp"

namespace typeflow {

template <float Rate>
struct dropout {
  static std::string type_name() {
    std::string rate = std::to_string(Rate);
    while (rate.size() > 3 && rate.back() == '0') rate.pop_back();
    return "dropout<" + rate + ">";
  }

  template <class In, class Context>
  struct bind : layer_defaults {
    static_assert(layer_check<layer_at<Context::position, dropout>, given<In>,
                              (Rate >= 0.f && Rate < 1.f)>::passed,
                  "dropout<Rate>: Rate is the fraction of inputs dropped and must lie in [0, 1)");
    using input_shape = In;
    using output_shape = In;
    static constexpr bool gradient_in_place = true;
    static constexpr std::size_t workspace_bytes_per_sample = In::size;  // the keep mask
    static constexpr std::size_t flops_per_sample = In::size;
    using compute_dtype = typename Context::precision::input;
    using output_dtype = typename Context::precision::input;
    // The mask's stream: mix_seed(model seed, mask_salt), counter (step, i). The CUDA executor draws the same.
    static constexpr std::uint64_t mask_salt = 0xD120u + Context::salt;

    template <int Batch>
    class executor : public executor_defaults {
      static constexpr std::ptrdiff_t count = static_cast<std::ptrdiff_t>(Batch * In::size);
      using value = typename output_dtype::value_type;  // float, f16 or bf16
      static constexpr float scale = 1.f / (1.f - Rate);

     public:
      explicit executor(const layer_io& io) : io_(io) {}

      void forward() {
        const value* in = reinterpret_cast<const value*>(io_.in);
        value* out = reinterpret_cast<value*>(io_.out);
        if (!io_.run->training || Rate == 0.f) {
          std::memcpy(out, in, sizeof(value) * count);
          return;
        }
        auto* keep = reinterpret_cast<std::uint8_t*>(io_.workspace);
        const random_stream rng{mix_seed(io_.run->seed, mask_salt), io_.run->step};
        // keep when uniform >= Rate, i.e. when the top 24 bits >= ceil(Rate * 2^24).
        const auto threshold = static_cast<std::uint32_t>(std::ceil(double{Rate} * 16777216.0));
        constexpr std::ptrdiff_t blocks = count / 4, chunk = 256;
#pragma omp parallel for schedule(static) if (count >= backend::cpu::parallel_threshold)
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
          backend::cpu::parallel_for(count, [=](std::ptrdiff_t i) { out[i] = keep[i] ? in[i] * scale : 0.f; });
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
        backend::cpu::parallel_for(count, [=](std::ptrdiff_t i) { grad[i] = keep[i] ? grad[i] * scale : 0.f; });
      }

     private:
      layer_io io_;
    };
  };
};

template <float Rate>
inline constexpr dtype_flow dtype_flow_of<dropout<Rate>> = dtype_flow::passes_through;

}  // namespace typeflow

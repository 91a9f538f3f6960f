// layer_norm on the CPU: rows over the cores, each row's mean and variance
// in double (two passes, eight lanes), its (mean, 1 / std) kept in the workspace; the
// parameter gradients as column sums in double, 64 features per thread.
#pragma once

#include <cmath>
#include <cstddef>

#include "typeflow/core/parallel.hpp"
#include "typeflow/layers/layer_norm.hpp"
#include "typeflow/contract/executor.hpp"

namespace typeflow {

template <layer_norm_options Options, class... Initializers, class Layer, int Batch>
class executor<layer_normalization<Options, Initializers...>, Layer, Batch, cpu> : public executor_defaults {
  using params = typename Layer::params;
  static constexpr bool has_gamma = Layer::has_gamma;
  static constexpr bool has_beta = Layer::has_beta;
  static constexpr std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(Batch * Layer::rows_per_sample);
  static constexpr std::ptrdiff_t n = Layer::features;
  static constexpr int column_block = 64;

 public:
  explicit executor(const layer_io<cpu>& io) : io_(io) {}

  // out (rows, n) = gamma * (in - mean) * inverse_std + beta, row by row.
  void forward() {
    const float* in = io_.in;
    float* out = io_.out;
    float* stats = statistics();  // (rows, 2)
    const float* gamma = gamma_values();
    const float* beta = beta_values();
    typeflow::parallel_rows(rows, n, [=](std::ptrdiff_t r) {
      const float* x = in + r * n;
      float* y = out + r * n;
      // Two passes in double: the mean, then the squared deviations from it.
      const double mean = row_sums<1>([=](std::ptrdiff_t j) { return terms{x[j], 0}; }).first / n;
      const double squares = row_sums<1>([=](std::ptrdiff_t j) {
        const double deviation = x[j] - mean;
        return terms{deviation * deviation, 0};
      }).first;
      const float row_mean = static_cast<float>(mean);
      const float inverse_std = static_cast<float>(1.0 / std::sqrt(squares / n + double{Options.epsilon}));
      stats[2 * r] = row_mean;
      stats[2 * r + 1] = inverse_std;
#pragma omp simd
      for (std::ptrdiff_t j = 0; j < n; ++j) y[j] = shift(scale((x[j] - row_mean) * inverse_std, gamma, j), beta, j);
    });
  }

  // With x̂ = (x - mean) * inverse_std and g = d_out * gamma, per row:
  //   d_gamma = Σ_rows d_out * x̂          d_beta = Σ_rows d_out
  //   d_in    = inverse_std * (g - mean(g) - x̂ * mean(g * x̂))
  // The parameter gradients read d_out before d_in overwrites it.
  void backward() {
    parameter_gradients();
    if (io_.d_in) input_gradient();
  }

 private:
  float* statistics() const { return reinterpret_cast<float*>(io_.workspace); }
  const float* gamma_values() const {
    if constexpr (has_gamma) return io_.params + params::template offset<0>;
    else return nullptr;
  }
  const float* beta_values() const {
    if constexpr (has_beta) return io_.params + params::template offset<has_gamma ? 1 : 0>;
    else return nullptr;
  }

  // Sums over a row's n features in double: term(j) gives feature j's terms
  // (the second only where Count is 2). Eight lanes (lane l takes the
  // features j = l mod 8), added in lane order at the end. Written out, not as
  // an omp simd reduction, which g++ 12 compiled, inside parallel_rows'
  // lambdas, with the sums kept in memory and gamma[j] read by gathers: 2.5x
  // slower on Zen 4. (Two plain arrays: one [Count][8] array was slower still.)
  struct terms {
    double first, second;
  };
  template <int Count, class Term>
  static terms row_sums(Term term) {
    constexpr int lanes = 8;
    constexpr std::ptrdiff_t body = n - n % lanes;
    double first[lanes] = {}, second[lanes] = {};
    auto add = [&](int l, terms t) {
      first[l] += t.first;
      if constexpr (Count == 2) second[l] += t.second;
    };
    for (std::ptrdiff_t j0 = 0; j0 < body; j0 += lanes) {
#pragma omp simd
      for (int l = 0; l < lanes; ++l) add(l, term(j0 + l));
    }
    for (std::ptrdiff_t j = body; j < n; ++j) add(static_cast<int>(j - body), term(j));
    terms sums{0, 0};
    for (int l = 0; l < lanes; ++l) {
      sums.first += first[l];
      sums.second += second[l];
    }
    return sums;
  }

  // gamma[j] * v and v + beta[j] where the layer has them, decided at compile
  // time: with a run-time null test g++ loaded gamma[j] by a gather.
  static float scale(float v, [[maybe_unused]] const float* gamma, [[maybe_unused]] std::ptrdiff_t j) {
    if constexpr (has_gamma) return gamma[j] * v;
    else return v;
  }
  static float shift(float v, [[maybe_unused]] const float* beta, [[maybe_unused]] std::ptrdiff_t j) {
    if constexpr (has_beta) return v + beta[j];
    else return v;
  }

  // Column sums over all rows, a block of 64 features per thread.
  void parameter_gradients() {
    if constexpr (has_gamma || has_beta) {
      const float* in = io_.in;
      const float* d_out = io_.d_out;
      const float* stats = statistics();
      float* d_gamma = nullptr;
      float* d_beta = nullptr;
      if constexpr (has_gamma) d_gamma = io_.grads + params::template offset<0>;
      if constexpr (has_beta) d_beta = io_.grads + params::template offset<has_gamma ? 1 : 0>;
#pragma omp parallel for schedule(static) if (rows * n >= typeflow::parallel_threshold)
      for (std::ptrdiff_t j0 = 0; j0 < n; j0 += column_block) {
        const std::ptrdiff_t j1 = j0 + column_block < n ? j0 + column_block : n;
        double scale_sums[column_block] = {}, offset_sums[column_block] = {};
        for (std::ptrdiff_t r = 0; r < rows; ++r) {
          const float* x = in + r * n;
          const float* dy = d_out + r * n;
          const float mean = stats[2 * r], inverse_std = stats[2 * r + 1];
#pragma omp simd
          for (std::ptrdiff_t j = j0; j < j1; ++j) {
            scale_sums[j - j0] += double{dy[j]} * ((x[j] - mean) * inverse_std);
            offset_sums[j - j0] += dy[j];
          }
        }
        for (std::ptrdiff_t j = j0; j < j1; ++j) {
          if (d_gamma) d_gamma[j] = static_cast<float>(scale_sums[j - j0]);
          if (d_beta) d_beta[j] = static_cast<float>(offset_sums[j - j0]);
        }
      }
    }
  }

  void input_gradient() {
    const float* in = io_.in;
    const float* d_out = io_.d_out;
    float* d_in = io_.d_in;  // may be d_out's buffer: each element is read before it is written
    const float* stats = statistics();
    const float* gamma = gamma_values();
    typeflow::parallel_rows(rows, n, [=](std::ptrdiff_t r) {
      const float* x = in + r * n;
      const float* dy = d_out + r * n;
      float* dx = d_in + r * n;
      const float mean = stats[2 * r], inverse_std = stats[2 * r + 1];
      const auto [sum_g, sum_g_normalized] = row_sums<2>([=](std::ptrdiff_t j) {
        const float g = scale(dy[j], gamma, j);
        return terms{g, double{g} * ((x[j] - mean) * inverse_std)};
      });
      const auto mean_g = static_cast<float>(sum_g / n);
      const auto mean_g_normalized = static_cast<float>(sum_g_normalized / n);
#pragma omp simd
      for (std::ptrdiff_t j = 0; j < n; ++j) {
        const float g = scale(dy[j], gamma, j);
        const float normalized = (x[j] - mean) * inverse_std;
        dx[j] = inverse_std * (g - mean_g - normalized * mean_g_normalized);
      }
    });
  }

  layer_io<cpu> io_;
};

}  // namespace typeflow

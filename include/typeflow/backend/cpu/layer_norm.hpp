// layer_norm on the CPU: rows over the cores, each row's mean and variance
// in double (two passes), its (mean, 1 / std) kept in the workspace; the
// parameter gradients as column sums in double, 64 features per thread.
#pragma once

#include <cmath>
#include <cstddef>

#include "typeflow/backend/cpu/parallel.hpp"
#include "typeflow/layers/layer_norm.hpp"
#include "typeflow/model/executor.hpp"

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
    backend::cpu::parallel_rows(rows, n, [=](std::ptrdiff_t r) {
      const float* x = in + r * n;
      float* y = out + r * n;
      // Two passes in double: the mean, then the squared deviations from
      // it (omp simd lets the double sums use vector lanes).
      double sum = 0;
#pragma omp simd reduction(+ : sum)
      for (std::ptrdiff_t j = 0; j < n; ++j) sum += x[j];
      const double mean = sum / n;
      double squares = 0;
#pragma omp simd reduction(+ : squares)
      for (std::ptrdiff_t j = 0; j < n; ++j) squares += (x[j] - mean) * (x[j] - mean);
      const float row_mean = static_cast<float>(mean);
      const float inverse_std = static_cast<float>(1.0 / std::sqrt(squares / n + double{Options.epsilon}));
      stats[2 * r] = row_mean;
      stats[2 * r + 1] = inverse_std;
#pragma omp simd
      for (std::ptrdiff_t j = 0; j < n; ++j) {
        const float normalized = (x[j] - row_mean) * inverse_std;
        y[j] = (gamma ? gamma[j] * normalized : normalized) + (beta ? beta[j] : 0.f);
      }
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
#pragma omp parallel for schedule(static) if (rows * n >= backend::cpu::parallel_threshold)
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
    backend::cpu::parallel_rows(rows, n, [=](std::ptrdiff_t r) {
      const float* x = in + r * n;
      const float* dy = d_out + r * n;
      float* dx = d_in + r * n;
      const float mean = stats[2 * r], inverse_std = stats[2 * r + 1];
      double sum_g = 0, sum_g_normalized = 0;
#pragma omp simd reduction(+ : sum_g, sum_g_normalized)
      for (std::ptrdiff_t j = 0; j < n; ++j) {
        const float g = gamma ? dy[j] * gamma[j] : dy[j];
        sum_g += g;
        sum_g_normalized += double{g} * ((x[j] - mean) * inverse_std);
      }
      const auto mean_g = static_cast<float>(sum_g / n);
      const auto mean_g_normalized = static_cast<float>(sum_g_normalized / n);
#pragma omp simd
      for (std::ptrdiff_t j = 0; j < n; ++j) {
        const float g = gamma ? dy[j] * gamma[j] : dy[j];
        const float normalized = (x[j] - mean) * inverse_std;
        dx[j] = inverse_std * (g - mean_g - normalized * mean_g_normalized);
      }
    });
  }

  layer_io<cpu> io_;
};

}  // namespace typeflow

// batch_normalization on the CPU: blocks of 64 features over the cores, each
// block's batch mean and biased variance summed in double over the batch's
// rows, the batch's (mean, 1 / std) kept in the workspace for backward. In a
// last partial batch (run_state::valid_samples) the statistics and their
// gradient count the valid rows only, and the padding rows get no gradient,
// as a batch of just those samples would; a replica with none of them leaves
// the moving statistics alone.
#pragma once

#include <cmath>
#include <cstddef>

#include "typeflow/core/parallel.hpp"
#include "typeflow/core/batch_norm_math.hpp"
#include "typeflow/layers/batch_norm.hpp"
#include "typeflow/contract/executor.hpp"

namespace typeflow {

template <batch_norm_options Options, class... Initializers, class Layer, int Batch>
class executor<batch_normalization<Options, Initializers...>, Layer, Batch, cpu> : public executor_defaults {
  using params = typename Layer::params;
  static constexpr bool has_gamma = Layer::has_gamma;
  static constexpr bool has_beta = Layer::has_beta;
  static constexpr std::size_t gamma_index = Layer::gamma_index;
  static constexpr std::size_t beta_index = Layer::beta_index;
  static constexpr std::size_t moving_mean_index = Layer::moving_mean_index;
  static constexpr std::size_t moving_variance_index = Layer::moving_variance_index;
  static constexpr std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(Batch * Layer::rows_per_sample);
  static constexpr std::ptrdiff_t n = Layer::features;
  static constexpr int column_block = 64;  // features per thread's share

 public:
  explicit executor(const layer_io<cpu>& io) : io_(io) {}

  void forward() {
    if (io_.run->training)
      forward_training();
    else
      forward_inference();
  }

  // With x̂ = (x - mean) * inverse_std over the batch's statistics, per feature:
  //   d_beta  = Σ_rows d_out                 d_gamma = Σ_rows d_out * x̂
  //   d_in    = gamma * inverse_std / rows * (rows * d_out - d_beta - x̂ * d_gamma)
  // over the valid rows; the padding's d_in is 0. Each block of features
  // sums d_out over the rows before its d_in is written over d_out.
  void backward() {
    const std::ptrdiff_t live = live_rows();
    const float* in = io_.in;
    const float* d_out = io_.d_out;
    float* d_in = io_.d_in;
    const float* mean = batch_mean();
    const float* inverse_std = batch_inverse_std();
    const float* gamma = gamma_values();
    float* d_gamma = has_gamma ? io_.grads + params::template offset<gamma_index> : nullptr;
    float* d_beta = has_beta ? io_.grads + params::template offset<beta_index> : nullptr;
#pragma omp parallel for schedule(static) if (rows * n >= typeflow::parallel_threshold)
    for (std::ptrdiff_t j0 = 0; j0 < n; j0 += column_block) {
      const std::ptrdiff_t j1 = j0 + column_block < n ? j0 + column_block : n;
      double sum_dy[column_block] = {}, sum_dy_normalized[column_block] = {};
      for (std::ptrdiff_t r = 0; r < live; ++r) {
        const float* x = in + r * n;
        const float* dy = d_out + r * n;
        for (std::ptrdiff_t j = j0; j < j1; ++j) {
          sum_dy[j - j0] += dy[j];
          sum_dy_normalized[j - j0] += double{dy[j]} * batch_norm_math::normalized_of(x[j], mean[j], inverse_std[j]);
        }
      }
      for (std::ptrdiff_t j = j0; j < j1; ++j) {
        if (d_gamma) d_gamma[j] = static_cast<float>(sum_dy_normalized[j - j0]);
        if (d_beta) d_beta[j] = static_cast<float>(sum_dy[j - j0]);
      }
      if (!d_in) continue;
      float mean_dy[column_block], mean_dy_normalized[column_block], factor[column_block];
      const double count = batch_norm_math::divisor_of(static_cast<int>(live));
      for (std::ptrdiff_t j = j0; j < j1; ++j) {
        mean_dy[j - j0] = static_cast<float>(sum_dy[j - j0] / count);
        mean_dy_normalized[j - j0] = static_cast<float>(sum_dy_normalized[j - j0] / count);
        factor[j - j0] = (gamma ? gamma[j] : 1.f) * inverse_std[j];
      }
      for (std::ptrdiff_t r = 0; r < live; ++r) {
        const float* x = in + r * n;
        const float* dy = d_out + r * n;
        float* dx = d_in + r * n;  // may be d_out's buffer: each element is read before it is written
        for (std::ptrdiff_t j = j0; j < j1; ++j)
          dx[j] = batch_norm_math::normalized_gradient(dy[j], x[j], mean[j], inverse_std[j], factor[j - j0],
                                                       mean_dy[j - j0], mean_dy_normalized[j - j0]);
      }
      for (std::ptrdiff_t r = live; r < rows; ++r)
        for (std::ptrdiff_t j = j0; j < j1; ++j) d_in[r * n + j] = 0.f;
    }
  }

 private:
  // The rows the batch's statistics count: all, or a partial batch's valid ones.
  std::ptrdiff_t live_rows() const {
    return batch_norm_math::live_rows_of(io_.run->valid_samples, static_cast<int>(Layer::rows_per_sample),
                                         static_cast<int>(rows));
  }
  float* batch_mean() const { return reinterpret_cast<float*>(io_.workspace); }
  float* batch_inverse_std() const { return reinterpret_cast<float*>(io_.workspace) + n; }
  const float* gamma_values() const {
    if constexpr (has_gamma) return io_.params + params::template offset<gamma_index>;
    else return nullptr;
  }
  const float* beta_values() const {
    if constexpr (has_beta) return io_.params + params::template offset<beta_index>;
    else return nullptr;
  }
  float* moving_mean() const { return io_.params + params::template offset<moving_mean_index>; }
  float* moving_variance() const { return io_.params + params::template offset<moving_variance_index>; }

  // Per block of features: the batch mean, then the biased variance (two
  // passes, summed in double), the moving statistics' update, and the output.
  void forward_training() {
    const std::ptrdiff_t live = live_rows();
    const double count = batch_norm_math::divisor_of(static_cast<int>(live));
    const float* in = io_.in;
    float* out = io_.out;
    float* mean = batch_mean();
    float* inverse_std = batch_inverse_std();
    const float* gamma = gamma_values();
    const float* beta = beta_values();
    float* moving_mean_values = moving_mean();
    float* moving_variance_values = moving_variance();
    constexpr float momentum = Options.momentum;
    constexpr float update_weight = static_cast<float>(1.0 - double{Options.momentum});
#pragma omp parallel for schedule(static) if (rows * n >= typeflow::parallel_threshold)
    for (std::ptrdiff_t j0 = 0; j0 < n; j0 += column_block) {
      const std::ptrdiff_t j1 = j0 + column_block < n ? j0 + column_block : n;
      double sums[column_block] = {};
      for (std::ptrdiff_t r = 0; r < live; ++r)
        for (std::ptrdiff_t j = j0; j < j1; ++j) sums[j - j0] += in[r * n + j];
      double means[column_block], squares[column_block] = {};
      for (std::ptrdiff_t j = j0; j < j1; ++j) means[j - j0] = sums[j - j0] / count;
      for (std::ptrdiff_t r = 0; r < live; ++r)
        for (std::ptrdiff_t j = j0; j < j1; ++j) {
          const double deviation = in[r * n + j] - means[j - j0];
          squares[j - j0] += deviation * deviation;
        }
      for (std::ptrdiff_t j = j0; j < j1; ++j) {
        const double variance = squares[j - j0] / count;
        mean[j] = static_cast<float>(means[j - j0]);
        inverse_std[j] = batch_norm_math::inverse_std_of(variance, Options.epsilon);
        if (live == 0) continue;  // no sample here: the moving statistics stay
        moving_mean_values[j] = batch_norm_math::moving_average_of(moving_mean_values[j], mean[j], momentum, update_weight);
        moving_variance_values[j] = batch_norm_math::moving_average_of(
            moving_variance_values[j], static_cast<float>(variance), momentum, update_weight);
      }
      normalize_block(in, out, j0, j1, mean + j0, inverse_std + j0, gamma, beta);
    }
  }

  // The moving statistics in place of the batch's; nothing is updated.
  void forward_inference() {
    const float* in = io_.in;
    float* out = io_.out;
    const float* moving_mean_values = moving_mean();
    const float* moving_variance_values = moving_variance();
    const float* gamma = gamma_values();
    const float* beta = beta_values();
#pragma omp parallel for schedule(static) if (rows * n >= typeflow::parallel_threshold)
    for (std::ptrdiff_t j0 = 0; j0 < n; j0 += column_block) {
      const std::ptrdiff_t j1 = j0 + column_block < n ? j0 + column_block : n;
      float inverse_std[column_block];
      for (std::ptrdiff_t j = j0; j < j1; ++j)
        inverse_std[j - j0] = batch_norm_math::inverse_std_of(double{moving_variance_values[j]}, Options.epsilon);
      normalize_block(in, out, j0, j1, moving_mean_values + j0, inverse_std, gamma, beta);
    }
  }

  // out[:, j0:j1] = gamma * (in - mean) * inverse_std + beta; mean and
  // inverse_std hold the block's features only (index j - j0).
  static void normalize_block(const float* in, float* out, std::ptrdiff_t j0, std::ptrdiff_t j1,
                              const float* mean, const float* inverse_std, const float* gamma,
                              const float* beta) {
    for (std::ptrdiff_t r = 0; r < rows; ++r) {
      const float* x = in + r * n;
      float* y = out + r * n;
      for (std::ptrdiff_t j = j0; j < j1; ++j)
        y[j] = batch_norm_math::normalized_output(x[j], mean[j - j0], inverse_std[j - j0], gamma, beta,
                                                  static_cast<int>(j));
    }
  }

  layer_io<cpu> io_;
};

}  // namespace typeflow

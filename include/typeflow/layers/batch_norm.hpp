// batch_normalization<Options>: normalises each feature of the last axis over
// the batch, as Keras 3's BatchNormalization(axis=-1).
//
//   y = gamma * (x - mean) / sqrt(var + epsilon) + beta
//
// mean and var are per feature, taken over every other axis: the batch and
// any leading positions of the sample (rows = B * positions).
//
//   input            (B, ..., n)
//   gamma            (n,)   ones    scale,     trained   (only when Options.scale)
//   beta             (n,)   zeros   offset,    trained   (only when Options.center)
//   moving_mean      (n,)   zeros   statistic, not trained
//   moving_variance  (n,)   ones    statistic, not trained
//   output           (B, ..., n)
//
// Training (fit's steps): mean and var are the batch's, var biased (divided
// by rows), and forward updates the moving statistics as Keras 3 does:
//   moving_mean     = moving_mean     * momentum + mean * (1 - momentum)
//   moving_variance = moving_variance * momentum + var  * (1 - momentum)
// PyTorch's BatchNorm differs in two ways: its momentum is the weight of the
// new value (torch 0.1 = Keras 0.9), and its running_var takes the unbiased
// batch variance, var * rows / (rows - 1). Weights moved between the two
// frameworks keep their meaning; a run's statistics do not match step for step.
// Inference (evaluate, predict): mean and var are the moving statistics, and
// nothing changes.
//
// The statistics live among the parameters, so save_weights and load_weights
// carry them, but no layer writes their gradient: it stays zero, and every
// optimizer leaves them as they are. Backward (after a training forward)
// differentiates through the batch statistics.
//
// The compiler refuses an input without a feature axis, a momentum outside
// [0, 1) and epsilon <= 0.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <type_traits>

#include "typeflow/backend/cpu/parallel.hpp"
#include "typeflow/initializers/initializers.hpp"
#include "typeflow/layers/options.hpp"
#include "typeflow/model/layer.hpp"

namespace typeflow {

// Keras's BatchNormalization defaults.
struct batch_norm_options {
  float momentum = 0.99f;  // the moving statistics' weight on their old value
  float epsilon = 1e-3f;   // added to the variance before the square root
  bool center = true;      // learn beta, an offset per feature
  bool scale = true;       // learn gamma, a scale per feature
};

template <batch_norm_options Options = batch_norm_options{}, class... Initializers>
struct batch_normalization {
  static constexpr std::string_view scope_name = "batch_norm";
  // "batch_norm", or with the options that differ from the defaults:
  // "batch_norm<momentum=0.9, eps=1e-05>".
  static std::string type_name() {
    constexpr batch_norm_options defaults{};
    std::string options;
    auto add = [&](const char* name, float value) {
      char text[48];
      std::snprintf(text, sizeof text, "%s%s=%g", options.empty() ? "" : ", ", name, static_cast<double>(value));
      options += text;
    };
    if (Options.momentum != defaults.momentum) add("momentum", Options.momentum);
    if (Options.epsilon != defaults.epsilon) add("eps", Options.epsilon);
    if (Options.center != defaults.center) options += options.empty() ? "center=false" : ", center=false";
    if (Options.scale != defaults.scale) options += options.empty() ? "scale=false" : ", scale=false";
    return options.empty() ? "batch_norm" : "batch_norm<" + options + ">";
  }

  template <class In, class Context>
  struct bind : layer_defaults {
    static_assert(layer_check<layer_at<Context::position, batch_normalization>, given<In>,
                              (detail::is_normalization_option<Initializers> && ...)>::passed,
                  "batch_normalization<Options, Initializers...>: each initializer must be gamma_initializer<> or "
                  "beta_initializer<>");
    static_assert(layer_check<layer_at<Context::position, batch_normalization>, given<In>,
                              option_count<gamma_initializer, Initializers...> <= 1 &&
                                  option_count<beta_initializer, Initializers...> <= 1>::passed,
                  "batch_normalization<Options, Initializers...>: each kind of initializer may be given once");
    static_assert(layer_check<layer_at<Context::position, batch_normalization>, given<In>, (In::rank >= 1)>::passed,
                  "batch_norm: the input needs at least one axis; batch_norm normalises each feature of the "
                  "last one");
    static_assert(layer_check<layer_at<Context::position, batch_normalization>, given<In>,
                              (Options.momentum >= 0.f && Options.momentum < 1.f)>::passed,
                  "batch_norm: momentum is the moving statistics' weight on their old value and must lie "
                  "in [0, 1) (Keras's default is 0.99; PyTorch's momentum m is Keras's 1 - m)");
    static_assert(layer_check<layer_at<Context::position, batch_normalization>, given<In>,
                              (Options.epsilon > 0.f)>::passed,
                  "batch_norm: epsilon is added to the variance before the square root and must be "
                  "positive (Keras's default is 1e-3)");

    static constexpr int features = [] {
      if constexpr (In::rank >= 1) return In::template dim<-1>;
      else return 1;  // keeps one error per mistake
    }();
    static constexpr std::size_t rows_per_sample = In::size / static_cast<std::size_t>(features);
    static constexpr bool has_gamma = Options.scale;
    static constexpr bool has_beta = Options.center;

    using gamma_param = param<"gamma", shape<features>, option_t<gamma_initializer, initializers::ones, Initializers...>, param_kind::scale>;
    using beta_param = param<"beta", shape<features>, option_t<beta_initializer, initializers::zeros, Initializers...>, param_kind::offset>;
    using mean_param = param<"moving_mean", shape<features>, initializers::zeros, param_kind::statistic>;
    using variance_param = param<"moving_variance", shape<features>, initializers::ones, param_kind::statistic>;

    using input_shape = In;
    using output_shape = In;
    using params = std::conditional_t<
        has_gamma,
        std::conditional_t<has_beta, param_list<gamma_param, beta_param, mean_param, variance_param>,
                           param_list<gamma_param, mean_param, variance_param>>,
        std::conditional_t<has_beta, param_list<beta_param, mean_param, variance_param>,
                           param_list<mean_param, variance_param>>>;
    static constexpr std::size_t gamma_index = 0;
    static constexpr std::size_t beta_index = has_gamma ? 1 : 0;
    static constexpr std::size_t moving_mean_index = std::size_t{has_gamma} + std::size_t{has_beta};
    static constexpr std::size_t moving_variance_index = moving_mean_index + 1;

    // Per element in training: the mean's add, the variance's subtract,
    // multiply and add, and the normalisation's subtract, multiply and multiply-add.
    static constexpr std::size_t flops_per_sample = 8 * In::size;
    static constexpr bool gradient_in_place = true;
    // The batch's (mean, 1 / sqrt(var + epsilon)) per feature, from forward to
    // backward: a fixed size, whatever the batch.
    static constexpr std::size_t workspace_bytes_per_step = 2 * static_cast<std::size_t>(features) * sizeof(float);

    template <int Batch>
    class executor : public executor_defaults {
      static constexpr std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(Batch * rows_per_sample);
      static constexpr std::ptrdiff_t n = features;
      static constexpr int column_block = 64;  // features per thread's share

     public:
      explicit executor(const layer_io& io) : io_(io) {}

      void forward() {
        if (io_.run->training)
          forward_training();
        else
          forward_inference();
      }

      // With x̂ = (x - mean) * inverse_std over the batch's statistics, per feature:
      //   d_beta  = Σ_rows d_out                 d_gamma = Σ_rows d_out * x̂
      //   d_in    = gamma * inverse_std / rows * (rows * d_out - d_beta - x̂ * d_gamma)
      // Each block of features sums d_out over all rows before its d_in is
      // written over d_out.
      void backward() {
        const float* in = io_.in;
        const float* d_out = io_.d_out;
        float* d_in = io_.d_in;
        const float* mean = batch_mean();
        const float* inverse_std = batch_inverse_std();
        const float* gamma = gamma_values();
        float* d_gamma = has_gamma ? io_.grads + params::template offset<gamma_index> : nullptr;
        float* d_beta = has_beta ? io_.grads + params::template offset<beta_index> : nullptr;
#pragma omp parallel for schedule(static) if (rows * n >= backend::cpu::parallel_threshold)
        for (std::ptrdiff_t j0 = 0; j0 < n; j0 += column_block) {
          const std::ptrdiff_t j1 = j0 + column_block < n ? j0 + column_block : n;
          double sum_dy[column_block] = {}, sum_dy_normalized[column_block] = {};
          for (std::ptrdiff_t r = 0; r < rows; ++r) {
            const float* x = in + r * n;
            const float* dy = d_out + r * n;
            for (std::ptrdiff_t j = j0; j < j1; ++j) {
              sum_dy[j - j0] += dy[j];
              sum_dy_normalized[j - j0] += double{dy[j]} * ((x[j] - mean[j]) * inverse_std[j]);
            }
          }
          for (std::ptrdiff_t j = j0; j < j1; ++j) {
            if (d_gamma) d_gamma[j] = static_cast<float>(sum_dy_normalized[j - j0]);
            if (d_beta) d_beta[j] = static_cast<float>(sum_dy[j - j0]);
          }
          if (!d_in) continue;
          float mean_dy[column_block], mean_dy_normalized[column_block], factor[column_block];
          for (std::ptrdiff_t j = j0; j < j1; ++j) {
            mean_dy[j - j0] = static_cast<float>(sum_dy[j - j0] / rows);
            mean_dy_normalized[j - j0] = static_cast<float>(sum_dy_normalized[j - j0] / rows);
            factor[j - j0] = (gamma ? gamma[j] : 1.f) * inverse_std[j];
          }
          for (std::ptrdiff_t r = 0; r < rows; ++r) {
            const float* x = in + r * n;
            const float* dy = d_out + r * n;
            float* dx = d_in + r * n;  // may be d_out's buffer: each element is read before it is written
            for (std::ptrdiff_t j = j0; j < j1; ++j) {
              const float normalized = (x[j] - mean[j]) * inverse_std[j];
              dx[j] = factor[j - j0] * (dy[j] - mean_dy[j - j0] - normalized * mean_dy_normalized[j - j0]);
            }
          }
        }
      }

     private:
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
#pragma omp parallel for schedule(static) if (rows * n >= backend::cpu::parallel_threshold)
        for (std::ptrdiff_t j0 = 0; j0 < n; j0 += column_block) {
          const std::ptrdiff_t j1 = j0 + column_block < n ? j0 + column_block : n;
          double sums[column_block] = {};
          for (std::ptrdiff_t r = 0; r < rows; ++r)
            for (std::ptrdiff_t j = j0; j < j1; ++j) sums[j - j0] += in[r * n + j];
          double means[column_block], squares[column_block] = {};
          for (std::ptrdiff_t j = j0; j < j1; ++j) means[j - j0] = sums[j - j0] / rows;
          for (std::ptrdiff_t r = 0; r < rows; ++r)
            for (std::ptrdiff_t j = j0; j < j1; ++j) {
              const double deviation = in[r * n + j] - means[j - j0];
              squares[j - j0] += deviation * deviation;
            }
          for (std::ptrdiff_t j = j0; j < j1; ++j) {
            const double variance = squares[j - j0] / rows;
            mean[j] = static_cast<float>(means[j - j0]);
            inverse_std[j] = static_cast<float>(1.0 / std::sqrt(variance + double{Options.epsilon}));
            moving_mean_values[j] = moving_mean_values[j] * momentum + mean[j] * update_weight;
            moving_variance_values[j] =
                moving_variance_values[j] * momentum + static_cast<float>(variance) * update_weight;
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
#pragma omp parallel for schedule(static) if (rows * n >= backend::cpu::parallel_threshold)
        for (std::ptrdiff_t j0 = 0; j0 < n; j0 += column_block) {
          const std::ptrdiff_t j1 = j0 + column_block < n ? j0 + column_block : n;
          float inverse_std[column_block];
          for (std::ptrdiff_t j = j0; j < j1; ++j)
            inverse_std[j - j0] =
                static_cast<float>(1.0 / std::sqrt(double{moving_variance_values[j]} + double{Options.epsilon}));
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
          for (std::ptrdiff_t j = j0; j < j1; ++j) {
            const float normalized = (x[j] - mean[j - j0]) * inverse_std[j - j0];
            y[j] = (gamma ? gamma[j] * normalized : normalized) + (beta ? beta[j] : 0.f);
          }
        }
      }

      layer_io io_;
    };
  };
};

using batch_norm = batch_normalization<>;

}  // namespace typeflow

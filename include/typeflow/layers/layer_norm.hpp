// layer_normalization<Options>: normalises each sample's feature vector, as
// Keras's LayerNormalization(axis=-1).
//
//   y = gamma * (x - mean) / sqrt(var + epsilon) + beta
//
// with mean and var (biased: divided by n) taken over the last axis of each
// row, separately for every sample and every leading position.
//
//   input   (B, ..., n)
//   gamma   (n,)            ones    (only when Options.scale)
//   beta    (n,)            zeros   (only when Options.center)
//   output  (B, ..., n)
//
// Forward keeps each row's mean and 1 / sqrt(var + epsilon) in the layer's
// workspace for backward. Backward writes d_gamma, d_beta and, in place over
// d_out, d_in. Training and inference compute the same thing.
//
// The compiler refuses an input without a feature axis and epsilon <= 0.
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

// Keras's LayerNormalization defaults.
struct layer_norm_options {
  float epsilon = 1e-3f;  // added to the variance before the square root
  bool center = true;     // learn beta, an offset per feature
  bool scale = true;      // learn gamma, a scale per feature
};

template <layer_norm_options Options = layer_norm_options{}, class... Initializers>
struct layer_normalization {
  static constexpr std::string_view scope_name = "layer_norm";
  // "layer_norm", or with the options that differ from the defaults:
  // "layer_norm<eps=1e-05, center=false>".
  static std::string type_name() {
    constexpr layer_norm_options defaults{};
    std::string options;
    auto add = [&](const std::string& option) { options += (options.empty() ? "" : ", ") + option; };
    if (Options.epsilon != defaults.epsilon) {
      char text[32];
      std::snprintf(text, sizeof text, "eps=%g", static_cast<double>(Options.epsilon));
      add(text);
    }
    if (Options.center != defaults.center) add(Options.center ? "center=true" : "center=false");
    if (Options.scale != defaults.scale) add(Options.scale ? "scale=true" : "scale=false");
    return options.empty() ? "layer_norm" : "layer_norm<" + options + ">";
  }

  template <class In, class Context>
  struct bind : layer_defaults {
    static_assert(layer_check<layer_at<Context::position, layer_normalization>, given<In>,
                              (detail::is_normalization_option<Initializers> && ...)>::passed,
                  "layer_normalization<Options, Initializers...>: each initializer must be gamma_initializer<> or "
                  "beta_initializer<>");
    static_assert(layer_check<layer_at<Context::position, layer_normalization>, given<In>,
                              option_count<gamma_initializer, Initializers...> <= 1 &&
                                  option_count<beta_initializer, Initializers...> <= 1>::passed,
                  "layer_normalization<Options, Initializers...>: each kind of initializer may be given once");
    static_assert(layer_check<layer_at<Context::position, layer_normalization>, given<In>, (In::rank >= 1)>::passed,
                  "layer_norm: the input needs at least one axis; layer_norm normalises the last one");
    static_assert(layer_check<layer_at<Context::position, layer_normalization>, given<In>,
                              (Options.epsilon > 0.f)>::passed,
                  "layer_norm: epsilon is added to the variance before the square root and must be "
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

    using input_shape = In;
    using output_shape = In;
    using params = std::conditional_t<
        has_gamma, std::conditional_t<has_beta, param_list<gamma_param, beta_param>, param_list<gamma_param>>,
        std::conditional_t<has_beta, param_list<beta_param>, no_params>>;
    // Per element: the mean's add, the variance's subtract, multiply and add,
    // and the normalisation's subtract, multiply and multiply-add.
    static constexpr std::size_t flops_per_sample = 8 * In::size;
    static constexpr bool gradient_in_place = true;
    // Each row's (mean, 1 / sqrt(var + epsilon)), from forward to backward.
    static constexpr std::size_t workspace_bytes_per_sample = 2 * rows_per_sample * sizeof(float);

    template <int Batch>
    class executor : public executor_defaults {
      static constexpr std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(Batch * rows_per_sample);
      static constexpr std::ptrdiff_t n = features;
      static constexpr int column_block = 64;

     public:
      explicit executor(const layer_io& io) : io_(io) {}

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

      layer_io io_;
    };
  };
};

using layer_norm = layer_normalization<>;

}  // namespace typeflow

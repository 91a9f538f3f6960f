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
// [0, 1) and epsilon <= 0. The executor: backend/cpu/batch_norm.hpp.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <type_traits>

#include "typeflow/initializers/initializers.hpp"
#include "typeflow/layers/options.hpp"
#include "typeflow/contract/layer.hpp"

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
  };
};

using batch_norm = batch_normalization<>;

}  // namespace typeflow

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

#include "typeflow/initializers/initializers.hpp"
#include "typeflow/layers/options.hpp"
#include "typeflow/contract/layer.hpp"

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
  };
};

using layer_norm = layer_normalization<>;

}  // namespace typeflow

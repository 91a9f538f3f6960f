// Optimizers with Keras's update rules and defaults.
//
// An optimizer updates the whole parameter region as one flat array (the
// regions are laid out alike, padding included, so a padded float has a zero
// weight and a zero gradient and stays zero). Its per-element rule is a
// functor that the CUDA backend's multi-tensor kernel runs as it is.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "typeflow/backend/cpu/parallel.hpp"
#include "typeflow/core/host_device.hpp"

namespace typeflow::optimizers {

// Stochastic gradient descent, with optional (Nesterov) momentum:
//   v = momentum * v - lr * g;  w += v            (momentum)
//   w += momentum * v - lr * g                    (nesterov, after updating v)
//   w -= lr * g                                   (no momentum)
struct sgd {
  float learning_rate = 0.01f;
  float momentum = 0.f;
  bool nesterov = false;

  static constexpr std::string_view name = "sgd";
  static constexpr int slots = 1;  // the velocity v

  struct rule {
    float lr, momentum;
    bool nesterov;
    TYPEFLOW_HOST_DEVICE void operator()(float& w, float g, float& v) const {
      if (momentum == 0.f) {
        w -= lr * g;
        return;
      }
      v = momentum * v - lr * g;
      w += nesterov ? momentum * v - lr * g : v;
    }
  };

  // iteration is the 1-based count of updates, this one included.
  void update(float* weights, const float* grads, float* const* slot, std::ptrdiff_t n,
              std::int64_t /*iteration*/) const {
    const rule r{learning_rate, momentum, nesterov};
    float* velocity = slot[0];
    backend::cpu::parallel_for(n, [=](std::ptrdiff_t i) { r(weights[i], grads[i], velocity[i]); });
  }
};

// Adam (Kingma & Ba) as Keras writes it, with the bias corrections folded
// into the step size:
//   lr_t = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
//   m += (g - m) * (1 - beta_1);  v += (g^2 - v) * (1 - beta_2)
//   w -= lr_t * m / (sqrt(v) + epsilon)
struct adam {
  float learning_rate = 0.001f;
  float beta_1 = 0.9f;
  float beta_2 = 0.999f;
  float epsilon = 1e-7f;

  static constexpr std::string_view name = "adam";
  static constexpr int slots = 2;  // m and v

  struct rule {
    float step_size, beta_1, beta_2, epsilon;
    TYPEFLOW_HOST_DEVICE void operator()(float& w, float g, float& m, float& v) const {
      m += (g - m) * (1.f - beta_1);
      v += (g * g - v) * (1.f - beta_2);
      w -= step_size * m / (std::sqrt(v) + epsilon);
    }
  };

  void update(float* weights, const float* grads, float* const* slot, std::ptrdiff_t n,
              std::int64_t iteration) const {
    const double t = static_cast<double>(iteration);
    const double correction = std::sqrt(1.0 - std::pow(double{beta_2}, t)) / (1.0 - std::pow(double{beta_1}, t));
    const rule r{static_cast<float>(learning_rate * correction), beta_1, beta_2, epsilon};
    float* m = slot[0];
    float* v = slot[1];
    backend::cpu::parallel_for(n, [=](std::ptrdiff_t i) { r(weights[i], grads[i], m[i], v[i]); });
  }
};

template <class O>
concept optimizer = requires(const O& o, float* w, const float* g, float* const* s) {
  { O::slots } -> std::convertible_to<int>;
  { O::name } -> std::convertible_to<std::string_view>;
  o.update(w, g, s, std::ptrdiff_t{0}, std::int64_t{1});
};

}  // namespace typeflow::optimizers

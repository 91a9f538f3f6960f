// sgd: stochastic gradient descent with optional (Nesterov) momentum, Keras's rule:
//   v = momentum * v - lr * g;  w += v                  (momentum)
//   v = momentum * v - lr * g;  w += momentum * v - lr * g   (nesterov)
//   w -= lr * g                                         (momentum 0)
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "typeflow/core/host_device.hpp"
#include "typeflow/optimizers/update.hpp"

namespace typeflow::optimizers {

struct sgd {
  schedules::learning_rate learning_rate = 0.01;
  float momentum = 0.f;
  bool nesterov = false;
  float weight_decay = 0.f;
  decay_scope weight_decay_applies_to = decay_scope::all;
  std::optional<float> clipnorm{}, clipvalue{}, global_clipnorm{};

  static constexpr std::string_view name = "sgd";
  int slot_count() const { return momentum == 0.f ? 0 : 1; }  // the velocity v

  void validate() const {
    check_common_options(*this);
    if (!(momentum >= 0.f && momentum < 1.f))
      throw std::invalid_argument("sgd: momentum must lie in [0, 1) (got " + std::to_string(momentum) + ")");
  }

  struct rule {
    float lr, momentum;
    bool nesterov;
    TYPEFLOW_HOST_DEVICE void operator()(float& w, float g, float& v) const {
      v = momentum * v - lr * g;
      w += nesterov ? momentum * v - lr * g : v;
    }
  };

  void update(const update_arguments& a) const {
    const double lr = current_learning_rate(*this, a.iteration);
    clip_gradients(*this, a);
    decay_weights(*this, lr, a);
    float* w = a.weights;
    const float* g = a.grads;
    if (momentum == 0.f) {
      const float step = static_cast<float>(lr);
      backend::cpu::parallel_for(a.floats, [=](std::ptrdiff_t i) { w[i] -= step * g[i]; });
      return;
    }
    const rule r{static_cast<float>(lr), momentum, nesterov};
    float* v = a.slots[0];
    backend::cpu::parallel_for(a.floats, [=](std::ptrdiff_t i) { r(w[i], g[i], v[i]); });
  }
};

}  // namespace typeflow::optimizers

// rmsprop, Keras 3's rule (epsilon inside the square root, unlike PyTorch's):
//   v = rho * v + (1 - rho) * g^2
//   centered: a = rho * a + (1 - rho) * g;  d = v - a^2 + epsilon;  else d = v + epsilon
//   step = lr * g / sqrt(d)
//   momentum > 0: p = momentum * p + step; w -= p;   else w -= step
#pragma once

#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "typeflow/core/host_device.hpp"
#include "typeflow/optimizers/update.hpp"

namespace typeflow::optimizers {

struct rmsprop {
  schedules::learning_rate learning_rate = 0.001;
  float rho = 0.9f;
  float momentum = 0.f;
  float epsilon = 1e-7f;
  bool centered = false;
  float weight_decay = 0.f;
  decay_scope weight_decay_applies_to = decay_scope::all;
  std::optional<float> clipnorm{}, clipvalue{}, global_clipnorm{};

  static constexpr std::string_view name = "rmsprop";
  // v, then the momentum p, then the mean gradient a (each only when used).
  int slot_count() const { return 1 + (momentum > 0.f) + centered; }

  void validate() const {
    check_common_options(*this);
    if (!(rho >= 0.f && rho < 1.f))
      throw std::invalid_argument("rmsprop: rho must lie in [0, 1) (got " + std::to_string(rho) + ")");
    if (!(momentum >= 0.f && momentum < 1.f))
      throw std::invalid_argument("rmsprop: momentum must lie in [0, 1) (got " + std::to_string(momentum) + ")");
    if (!(epsilon > 0.f)) throw std::invalid_argument("rmsprop: epsilon must be positive");
  }

  struct rule {
    float lr, rho, momentum, epsilon;
    TYPEFLOW_HOST_DEVICE float step(float g, float& v) const {
      v = rho * v + (1.f - rho) * g * g;
      return lr * g / std::sqrt(v + epsilon);
    }
    TYPEFLOW_HOST_DEVICE float centered_step(float g, float& v, float& a) const {
      v = rho * v + (1.f - rho) * g * g;
      a = rho * a + (1.f - rho) * g;
      return lr * g / std::sqrt(v - a * a + epsilon);
    }
  };

  void update(const update_arguments& args) const {
    const double lr = current_learning_rate(*this, args.iteration);
    clip_gradients(*this, args);
    decay_weights(*this, lr, args);
    const rule r{static_cast<float>(lr), rho, momentum, epsilon};
    float* w = args.weights;
    const float* g = args.grads;
    float* v = args.slots[0];
    float* p = momentum > 0.f ? args.slots[1] : nullptr;
    float* a = centered ? args.slots[momentum > 0.f ? 2 : 1] : nullptr;
    const float mom = momentum;
    backend::cpu::parallel_for(args.floats, [=](std::ptrdiff_t i) {
      const float step = a ? r.centered_step(g[i], v[i], a[i]) : r.step(g[i], v[i]);
      if (p) {
        p[i] = mom * p[i] + step;
        w[i] -= p[i];
      } else {
        w[i] -= step;
      }
    });
  }
};

}  // namespace typeflow::optimizers

// rmsprop, Keras 3's rule (epsilon inside the square root, unlike PyTorch's):
//   v = rho * v + (1 - rho) * g^2
//   centered: a = rho * a + (1 - rho) * g;  d = v - a^2 + epsilon;  else d = v + epsilon
//   step = lr * g / sqrt(d)
//   momentum > 0: p = momentum * p + step; w -= p;   else w -= step
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "typeflow/core/host_device.hpp"
#include "typeflow/optimizers/update.hpp"

namespace typeflow::optimizers {

// One element's step; the options bool (the device), or std::true_type /
// std::false_type (visit(), for the CPU's loops). The slots: v, then the
// momentum p, then the mean gradient a (each only when used).
template <class Momentum = bool, class Centered = bool>
struct rmsprop_rule {
  float lr = 0.f, rho = 0.f, momentum = 0.f, epsilon = 0.f;
  Momentum has_momentum{};  // momentum > 0
  Centered centered{};

  TYPEFLOW_HOST_DEVICE auto slots() const { return slots_with<1>(has_momentum, centered); }
  TYPEFLOW_HOST_DEVICE void operator()(float& w, float g, float* s) const {
    float& v = s[0];
    v = rho * v + (1.f - rho) * g * g;
    float step;
    if (centered) {
      float& a = s[has_momentum ? 2 : 1];
      a = rho * a + (1.f - rho) * g;
      step = lr * g / std::sqrt(v - a * a + epsilon);
    } else {
      step = lr * g / std::sqrt(v + epsilon);
    }
    if (has_momentum) {
      float& p = s[1];
      p = momentum * p + step;
      w -= p;
    } else {
      w -= step;
    }
  }
  template <class F>
  void visit(F&& f) const {
    with_fixed([&](auto m, auto c) { f(rmsprop_rule<decltype(m), decltype(c)>{lr, rho, momentum, epsilon, m, c}); },
               has_momentum, centered);
  }
};

struct rmsprop {
  schedules::learning_rate learning_rate = 0.001;
  float rho = 0.9f;
  float momentum = 0.f;
  float epsilon = 1e-7f;
  bool centered = false;
  float weight_decay = 0.f;
  decay_scope weight_decay_applies_to = decay_scope::all;
  std::optional<float> clipnorm{}, clipvalue{}, global_clipnorm{};
  bool use_ema = false;  // Keras 3's optimizer EMA (optimizers/ema.hpp): one more slot
  float ema_momentum = 0.99f;
  std::optional<int> ema_overwrite_frequency{};

  static constexpr std::string_view name = "rmsprop";
  int slot_count() const { return 1 + (momentum > 0.f) + centered; }

  void validate() const {
    check_common_options(*this);
    if (!(rho >= 0.f && rho < 1.f))
      throw std::invalid_argument("rmsprop: rho must lie in [0, 1) (got " + std::to_string(rho) + ")");
    if (!(momentum >= 0.f && momentum < 1.f))
      throw std::invalid_argument("rmsprop: momentum must lie in [0, 1) (got " + std::to_string(momentum) + ")");
    if (!(epsilon > 0.f)) throw std::invalid_argument("rmsprop: epsilon must be positive");
  }
  rmsprop_rule<> rule(std::int64_t iteration) const {
    return {static_cast<float>(current_learning_rate(*this, iteration)), rho, momentum, epsilon, momentum > 0.f, centered};
  }
  void update(const update_arguments& a) const { apply_update(*this, a); }
};

}  // namespace typeflow::optimizers

// sgd: stochastic gradient descent with optional (Nesterov) momentum, Keras's rule:
//   v = momentum * v - lr * g;  w += v                  (momentum)
//   v = momentum * v - lr * g;  w += momentum * v - lr * g   (nesterov)
//   w -= lr * g                                         (momentum 0)
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "typeflow/core/host_device.hpp"
#include "typeflow/optimizers/update.hpp"

namespace typeflow::optimizers {

// One element's step; the options bool (the device), or std::true_type /
// std::false_type (visit(), for the CPU's loops). The slot: the velocity v,
// with momentum.
template <class Momentum = bool, class Nesterov = bool>
struct sgd_rule {
  float lr = 0.f, momentum = 0.f;
  Momentum has_momentum{};  // momentum != 0
  Nesterov nesterov{};

  TYPEFLOW_HOST_DEVICE auto slots() const { return slots_with<0>(has_momentum); }
  TYPEFLOW_HOST_DEVICE void operator()(float& w, float g, float* s) const {
    if (!has_momentum) {
      w -= lr * g;
      return;
    }
    float& v = s[0];
    v = momentum * v - lr * g;
    if (nesterov)
      w += momentum * v - lr * g;
    else
      w += v;
  }
  template <class F>
  void visit(F&& f) const {
    with_fixed([&](auto m, auto n) { f(sgd_rule<decltype(m), decltype(n)>{lr, momentum, m, n}); }, has_momentum,
               nesterov);
  }
};

struct sgd {
  schedules::learning_rate learning_rate = 0.01;
  float momentum = 0.f;
  bool nesterov = false;
  float weight_decay = 0.f;
  decay_scope weight_decay_applies_to = decay_scope::all;
  std::optional<float> clipnorm{}, clipvalue{}, global_clipnorm{};
  bool use_ema = false;  // Keras 3's optimizer EMA (optimizers/ema.hpp): one more slot
  float ema_momentum = 0.99f;
  std::optional<int> ema_overwrite_frequency{};

  static constexpr std::string_view name = "sgd";
  int slot_count() const { return momentum == 0.f ? 0 : 1; }

  void validate() const {
    check_common_options(*this);
    if (!(momentum >= 0.f && momentum < 1.f))
      throw std::invalid_argument("sgd: momentum must lie in [0, 1) (got " + std::to_string(momentum) + ")");
  }
  sgd_rule<> rule(std::int64_t iteration) const {
    return {static_cast<float>(current_learning_rate(*this, iteration)), momentum, momentum != 0.f, nesterov};
  }
  void update(const update_arguments& a) const { apply_update(*this, a); }
};

}  // namespace typeflow::optimizers

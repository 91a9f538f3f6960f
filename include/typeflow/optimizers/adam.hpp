// adam and adamw, as Keras 3 writes them, with the bias corrections folded
// into the step size:
//   lr_t = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
//   m += (g - m) * (1 - beta_1);  v += (g^2 - v) * (1 - beta_2)
//   w -= lr_t * m / (sqrt(v) + epsilon)                 (amsgrad: sqrt(max(v_hat, v)))
// Keras's epsilon sits outside the bias correction; PyTorch's adds epsilon to
// sqrt(v / (1 - beta_2^t)) instead, so the two differ by a factor
// sqrt(1 - beta_2^t) on epsilon (tests/reference covers both).
//
// adamw is adam with decoupled weight decay (default 0.004, as Keras's AdamW),
// applied as w -= lr * weight_decay * w before the step, to kernels and
// embeddings only by default.
//
// The slots: m, v, and with amsgrad the running maximum of v.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "typeflow/core/host_device.hpp"
#include "typeflow/optimizers/update.hpp"

namespace typeflow::optimizers {

// One element's step. Amsgrad: bool (what the device runs), or
// std::true_type / std::false_type (visit(), for the CPU's loops).
template <class Amsgrad = bool>
struct adam_rule {
  float step_size = 0.f, beta_1 = 0.f, beta_2 = 0.f, epsilon = 0.f;
  Amsgrad amsgrad{};

  TYPEFLOW_HOST_DEVICE auto slots() const { return slots_with<2>(amsgrad); }
  TYPEFLOW_HOST_DEVICE void operator()(float& w, float g, float* s) const {
    float& m = s[0];
    float& v = s[1];
    m += (g - m) * (1.f - beta_1);
    v += (g * g - v) * (1.f - beta_2);
    if (amsgrad) {
      float& v_max = s[2];
      v_max = v_max > v ? v_max : v;
      w -= step_size * m / (std::sqrt(v_max) + epsilon);
    } else {
      w -= step_size * m / (std::sqrt(v) + epsilon);
    }
  }
  template <class F>
  void visit(F&& f) const {
    with_fixed([&](auto a) { f(adam_rule<decltype(a)>{step_size, beta_1, beta_2, epsilon, a}); }, amsgrad);
  }
};

namespace detail {
template <class O>
void validate_adam(const O& o) {
  check_common_options(o);
  auto in_unit = [](float b, const char* what) {
    if (!(b >= 0.f && b < 1.f))
      throw std::invalid_argument(std::string(O::name) + ": " + what + " must lie in [0, 1) (got " +
                                  std::to_string(b) + ")");
  };
  in_unit(o.beta_1, "beta_1");
  in_unit(o.beta_2, "beta_2");
  if (!(o.epsilon > 0.f)) throw std::invalid_argument(std::string(O::name) + ": epsilon must be positive");
}

// The bias corrections folded into the step size, in double, then rounded.
template <class O>
adam_rule<> adam_rule_for(const O& o, std::int64_t iteration) {
  const double lr = current_learning_rate(o, iteration);
  const double t = static_cast<double>(iteration);
  const double correction = std::sqrt(1.0 - std::pow(double{o.beta_2}, t)) / (1.0 - std::pow(double{o.beta_1}, t));
  return {static_cast<float>(lr * correction), o.beta_1, o.beta_2, o.epsilon, o.amsgrad};
}
}  // namespace detail

struct adam {
  schedules::learning_rate learning_rate = 0.001;
  float beta_1 = 0.9f;
  float beta_2 = 0.999f;
  float epsilon = 1e-7f;
  bool amsgrad = false;
  float weight_decay = 0.f;
  decay_scope weight_decay_applies_to = decay_scope::all;
  std::optional<float> clipnorm{}, clipvalue{}, global_clipnorm{};
  bool use_ema = false;  // Keras 3's optimizer EMA (optimizers/ema.hpp): one more slot
  float ema_momentum = 0.99f;
  std::optional<int> ema_overwrite_frequency{};

  static constexpr std::string_view name = "adam";
  int slot_count() const { return amsgrad ? 3 : 2; }
  void validate() const { detail::validate_adam(*this); }
  adam_rule<> rule(std::int64_t iteration) const { return detail::adam_rule_for(*this, iteration); }
  void update(const update_arguments& a) const { apply_update(*this, a); }
};

struct adamw {
  schedules::learning_rate learning_rate = 0.001;
  float weight_decay = 0.004f;
  float beta_1 = 0.9f;
  float beta_2 = 0.999f;
  float epsilon = 1e-7f;
  bool amsgrad = false;
  decay_scope weight_decay_applies_to = decay_scope::kernels;
  std::optional<float> clipnorm{}, clipvalue{}, global_clipnorm{};
  bool use_ema = false;  // Keras 3's optimizer EMA (optimizers/ema.hpp): one more slot
  float ema_momentum = 0.99f;
  std::optional<int> ema_overwrite_frequency{};

  static constexpr std::string_view name = "adamw";
  int slot_count() const { return amsgrad ? 3 : 2; }
  void validate() const { detail::validate_adam(*this); }
  adam_rule<> rule(std::int64_t iteration) const { return detail::adam_rule_for(*this, iteration); }
  void update(const update_arguments& a) const { apply_update(*this, a); }
};

}  // namespace typeflow::optimizers

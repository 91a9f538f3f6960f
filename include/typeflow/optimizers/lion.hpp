// lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms"), Keras 3's rule:
//   w -= lr * sign(beta_1 * m + (1 - beta_1) * g)
//   m = beta_2 * m + (1 - beta_2) * g
// Weight decay is decoupled, to kernels and embeddings by default; Lion wants
// a learning rate 3-10x smaller and a decay 3-10x larger than AdamW's.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "typeflow/core/host_device.hpp"
#include "typeflow/optimizers/update.hpp"

namespace typeflow::optimizers {

// One element's step. The slot: the momentum m.
struct lion_rule {
  float lr = 0.f, beta_1 = 0.f, beta_2 = 0.f;
  TYPEFLOW_HOST_DEVICE auto slots() const { return slots_with<1>(); }
  TYPEFLOW_HOST_DEVICE void operator()(float& w, float g, float* s) const {
    float& m = s[0];
    const float c = beta_1 * m + (1.f - beta_1) * g;
    w -= lr * static_cast<float>((c > 0.f) - (c < 0.f));
    m = beta_2 * m + (1.f - beta_2) * g;
  }
};

struct lion {
  schedules::learning_rate learning_rate = 0.001;
  float beta_1 = 0.9f;
  float beta_2 = 0.99f;
  float weight_decay = 0.f;
  decay_scope weight_decay_applies_to = decay_scope::kernels;
  std::optional<float> clipnorm{}, clipvalue{}, global_clipnorm{};
  bool use_ema = false;  // Keras 3's optimizer EMA (optimizers/ema.hpp): one more slot
  float ema_momentum = 0.99f;
  std::optional<int> ema_overwrite_frequency{};

  static constexpr std::string_view name = "lion";
  int slot_count() const { return 1; }

  void validate() const {
    check_common_options(*this);
    if (!(beta_1 >= 0.f && beta_1 <= 1.f))
      throw std::invalid_argument("lion: beta_1 must lie in [0, 1] (got " + std::to_string(beta_1) + ")");
    if (!(beta_2 >= 0.f && beta_2 <= 1.f))
      throw std::invalid_argument("lion: beta_2 must lie in [0, 1] (got " + std::to_string(beta_2) + ")");
  }
  lion_rule rule(std::int64_t iteration) const {
    return {static_cast<float>(current_learning_rate(*this, iteration)), beta_1, beta_2};
  }
  void update(const update_arguments& a) const { apply_update(*this, a); }
};

}  // namespace typeflow::optimizers

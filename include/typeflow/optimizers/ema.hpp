// Keras 3's optimizer EMA (use_ema, ema_momentum, ema_overwrite_frequency):
// an exponential moving average of the trainable weights, kept in one more
// optimizer slot (so the memory plan and a checkpoint hold it).
//
// After each update (not after a skipped or accumulating step), over the
// trainable tensors (not normalization statistics):
//   average = m * average + (1 - m) * w,   m = 0 at the first update, ema_momentum after;
// and every ema_overwrite_frequency updates the weights become their
// averages. swap_ema_weights (callbacks/swap_ema_weights.hpp) evaluates with
// the averages; fit ends with the weights replaced by the averages, as
// Keras's finalize_variable_values.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "typeflow/core/parallel.hpp"
#include "typeflow/optimizers/element.hpp"
#include "typeflow/optimizers/update.hpp"

namespace typeflow::optimizers {

// An optimizer's EMA fields, found through wrappers such as accumulate<K>.
struct ema_options {
  bool use_ema = false;
  float ema_momentum = 0.99f;
  std::optional<int> ema_overwrite_frequency{};
};

template <class O>
ema_options ema_options_of(const O& o) {
  if constexpr (requires { o.inner; })
    return ema_options_of(o.inner);
  else if constexpr (requires { o.use_ema; o.ema_momentum; o.ema_overwrite_frequency; })
    return {o.use_ema, o.ema_momentum, o.ema_overwrite_frequency};
  else
    return {};
}

// Keras's checks of the EMA arguments.
inline void check_ema_options(const ema_options& e, std::string_view optimizer) {
  if (!e.use_ema) return;
  if (!(e.ema_momentum >= 0.f && e.ema_momentum <= 1.f))
    throw std::invalid_argument(std::string(optimizer) + ": ema_momentum must lie in [0, 1] (got " +
                                std::to_string(e.ema_momentum) + ")");
  if (e.ema_overwrite_frequency && *e.ema_overwrite_frequency < 1)
    throw std::invalid_argument(std::string(optimizer) + ": ema_overwrite_frequency must be at least 1 (got " +
                                std::to_string(*e.ema_overwrite_frequency) + ")");
}

// After update number `iteration` (1-based) changed a.weights: the average
// in `average` (the EMA slot), and the overwrite when it is due.
inline void update_moving_average(const update_arguments& a, float* average, const ema_options& e,
                                  std::int64_t iteration) {
  const ema_step step = ema_step_for(iteration, e.ema_momentum, e.ema_overwrite_frequency.value_or(0));
  const float momentum = step.momentum;
  const bool overwrite = step.overwrite;
  float* w = a.weights;
  for (const parameter_tensor& t : a.tensors) {
    if (t.kind == param_kind::statistic) continue;
    float* wt = w + t.offset;
    float* at = average + t.offset;
    if (overwrite)
      typeflow::parallel_for(static_cast<std::ptrdiff_t>(t.size), [=](std::ptrdiff_t i) {
        at[i] = moving_average(at[i], wt[i], momentum);
        wt[i] = at[i];
      });
    else
      typeflow::parallel_for(static_cast<std::ptrdiff_t>(t.size),
                                 [=](std::ptrdiff_t i) { at[i] = moving_average(at[i], wt[i], momentum); });
  }
}

// Exchanges the trainable tensors of the weights and the average (swap_ema_weights).
inline void swap_with_average(float* weights, float* average, std::span<const parameter_tensor> tensors) {
  for (const parameter_tensor& t : tensors) {
    if (t.kind == param_kind::statistic) continue;
    float* wt = weights + t.offset;
    float* at = average + t.offset;
    typeflow::parallel_for(static_cast<std::ptrdiff_t>(t.size), [=](std::ptrdiff_t i) {
      const float x = wt[i];
      wt[i] = at[i];
      at[i] = x;
    });
  }
}

// Copies the trainable tensors of `from` into `to` (finalize_variable_values).
inline void copy_trainable(const float* from, float* to, std::span<const parameter_tensor> tensors) {
  for (const parameter_tensor& t : tensors) {
    if (t.kind == param_kind::statistic) continue;
    const float* src = from + t.offset;
    float* dst = to + t.offset;
    typeflow::parallel_for(static_cast<std::ptrdiff_t>(t.size), [=](std::ptrdiff_t i) { dst[i] = src[i]; });
  }
}

}  // namespace typeflow::optimizers

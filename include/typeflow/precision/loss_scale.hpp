// Loss scaling for float16 training, as Keras 3's LossScaleOptimizer does it.
//
// The loss is multiplied by scale() before the backward pass, so that small
// gradients survive float16; the gradients are divided by it before the
// update. With dynamic scaling (Keras's defaults):
//   - the scale starts at 2^15;
//   - a step whose gradients hold an inf or a NaN is skipped: no update,
//     the scale halves;
//   - after growth_steps consecutive finite steps the scale doubles.
// A fixed scale never changes; a non-finite step is still skipped.
//
// The state machine is written once, loss_scale_state::after_step: the CPU
// engine runs it through loss_scale (train/cpu_engine.hpp), the CUDA backend's
// finish_step kernel on the step state in device memory
// (optimizers/device_update.hpp), which extends loss_scale_state.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "typeflow/core/host_device.hpp"

namespace typeflow::precision {

struct dynamic_loss_scale {
  float initial_scale = 32768.f;  // 2^15
  int growth_steps = 2000;
};

struct fixed_loss_scale {
  float scale = 1.f;
};

// The state machine's state and its step, plain data for host and device.
// Value-initialised, it is off (float32: no loss scaling): every step
// applies, and nothing changes.
struct loss_scale_state {
  std::int64_t skipped = 0;          // steps skipped for a non-finite gradient
  float loss_scale = 1.f;
  std::int32_t skip_non_finite = 0;  // loss scaling on: a non-finite step is skipped
  std::int32_t dynamic = 0;          // the scale halves and grows
  std::int32_t growth_steps = 0;
  std::int32_t finite_steps = 0;     // consecutive finite steps since the scale last changed

  // Whether a step whose gradients are (not) all finite is applied.
  TYPEFLOW_HOST_DEVICE bool applies(bool gradients_finite) const { return gradients_finite || !skip_non_finite; }

  // Called once per step with whether every gradient was finite; returns
  // whether the update is to be applied, and moves the scale on.
  TYPEFLOW_HOST_DEVICE bool after_step(bool gradients_finite) {
    if (!skip_non_finite) return true;
    if (!gradients_finite) {
      ++skipped;
      if (dynamic) {
        loss_scale *= 0.5f;
        finite_steps = 0;
      }
      return false;
    }
    if (dynamic && ++finite_steps == growth_steps) {
      loss_scale *= 2.f;
      finite_steps = 0;
    }
    return true;
  }
};

class loss_scale {
 public:
  explicit loss_scale(dynamic_loss_scale options) {
    if (!(options.initial_scale > 0.f) || !std::isfinite(options.initial_scale))
      throw std::invalid_argument("dynamic_loss_scale: initial_scale must be positive and finite; got " +
                                  std::to_string(options.initial_scale));
    if (options.growth_steps < 1)
      throw std::invalid_argument("dynamic_loss_scale: growth_steps must be at least 1; got " +
                                  std::to_string(options.growth_steps));
    state_.loss_scale = options.initial_scale;
    state_.skip_non_finite = 1;
    state_.dynamic = 1;
    state_.growth_steps = options.growth_steps;
  }
  explicit loss_scale(fixed_loss_scale options) {
    if (!(options.scale > 0.f) || !std::isfinite(options.scale))
      throw std::invalid_argument("fixed_loss_scale: scale must be positive and finite; got " +
                                  std::to_string(options.scale));
    state_.loss_scale = options.scale;
    state_.skip_non_finite = 1;
  }

  float scale() const noexcept { return state_.loss_scale; }
  std::int64_t skipped_steps() const noexcept { return state_.skipped; }
  bool dynamic() const noexcept { return state_.dynamic != 0; }
  const loss_scale_state& state() const noexcept { return state_; }
  // Continues from a saved state (load_checkpoint).
  void restore(const loss_scale_state& saved) noexcept { state_ = saved; }

  // Called once per step with whether every gradient was finite; returns
  // whether the update is to be applied, and moves the scale on.
  bool after_step(bool gradients_finite) noexcept { return state_.after_step(gradients_finite); }

 private:
  loss_scale_state state_;
};

// Whether all n values are finite (no inf, no NaN): one pass, vectorisable.
inline bool all_finite(const float* values, std::size_t n) noexcept {
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (std::size_t i = 0; i < n; ++i) bad |= !(values[i] - values[i] == 0.f);  // inf - inf and NaN are NaN
  return bad == 0;
}

// values *= 1 / scale: the gradients of a scaled loss, unscaled.
inline void unscale(float* values, std::size_t n, float scale) noexcept {
  const float inverse = 1.f / scale;
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) values[i] *= inverse;
}

// unscale and all_finite in one pass: values *= 1 / scale, and whether every
// value was finite. On false the values are no use (the step is skipped, and
// the next backward pass writes every gradient afresh).
inline bool unscale_all_finite(float* values, std::size_t n, float scale) noexcept {
  const float inverse = 1.f / scale;
  int bad = 0;
#pragma omp simd reduction(| : bad)
  for (std::size_t i = 0; i < n; ++i) {
    bad |= !(values[i] - values[i] == 0.f);
    values[i] *= inverse;
  }
  return bad == 0;
}

}  // namespace typeflow::precision

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
// model<Net, mixed_float16> runs this state machine in its step (train/model.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace typeflow::precision {

struct dynamic_loss_scale {
  float initial_scale = 32768.f;  // 2^15
  int growth_steps = 2000;
};

struct fixed_loss_scale {
  float scale = 1.f;
};

class loss_scale {
 public:
  explicit loss_scale(dynamic_loss_scale options)
      : scale_(options.initial_scale), growth_steps_(options.growth_steps), dynamic_(true) {
    if (!(options.initial_scale > 0.f) || !std::isfinite(options.initial_scale))
      throw std::invalid_argument("dynamic_loss_scale: initial_scale must be positive and finite; got " +
                                  std::to_string(options.initial_scale));
    if (options.growth_steps < 1)
      throw std::invalid_argument("dynamic_loss_scale: growth_steps must be at least 1; got " +
                                  std::to_string(options.growth_steps));
  }
  explicit loss_scale(fixed_loss_scale options) : scale_(options.scale), growth_steps_(0), dynamic_(false) {
    if (!(options.scale > 0.f) || !std::isfinite(options.scale))
      throw std::invalid_argument("fixed_loss_scale: scale must be positive and finite; got " +
                                  std::to_string(options.scale));
  }

  float scale() const noexcept { return scale_; }
  std::int64_t skipped_steps() const noexcept { return skipped_; }
  bool dynamic() const noexcept { return dynamic_; }

  // Called once per step with whether every gradient was finite; returns
  // whether the update is to be applied, and moves the scale on.
  bool after_step(bool gradients_finite) noexcept {
    if (!gradients_finite) {
      ++skipped_;
      if (dynamic_) {
        scale_ *= 0.5f;
        finite_steps_ = 0;
      }
      return false;
    }
    if (dynamic_ && ++finite_steps_ == growth_steps_) {
      scale_ *= 2.f;
      finite_steps_ = 0;
    }
    return true;
  }

 private:
  float scale_;
  int growth_steps_;
  bool dynamic_;
  int finite_steps_ = 0;
  std::int64_t skipped_ = 0;
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

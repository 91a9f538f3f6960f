// The NaN policy: a non-finite loss or gradient stops training before the
// update that it would spoil, so the weights stay those of the last good
// step. (Under mixed_float16 the loss scale skips such a step instead, as
// Keras's LossScaleOptimizer does.) Checking the loss alone is not enough: a
// NaN among the input features of a relu network leaves the loss finite
// (relu maps NaN to 0) while its gradient fills the first kernel with NaN.
//
// The engine throws non_finite_error naming the tensor; fit adds the epoch,
// the batch in it and the update number, or, with a
// callbacks::terminate_on_nan among its callbacks, ends the run cleanly.
// On tf::cuda the device refuses the update itself (optimizers::device::
// updatable_bits in its gradient statistics) and the engine reads that back
// (train/cuda_engine.hpp); the loss is checked after the step there.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "typeflow/core/parallel.hpp"
#include "typeflow/optimizers/update.hpp"
#include "typeflow/train/parameter_table.hpp"

namespace typeflow {

class non_finite_error : public std::runtime_error {
 public:
  non_finite_error(const std::string& message, std::string tensor)
      : std::runtime_error(message), tensor_(std::move(tensor)) {}
  // "loss", or the parameter whose gradient is not finite, e.g. "layers.1.kernel".
  const std::string& tensor() const noexcept { return tensor_; }

 private:
  std::string tensor_;
};

// Whether all n values are finite: one pass, split across the cores for
// large regions (a gradient region is read once per step for this).
inline bool all_finite_parallel(const float* values, std::size_t n) noexcept {
  int bad = 0;
#pragma omp parallel for simd reduction(| : bad) if (n >= typeflow::parallel_threshold)
  for (std::size_t i = 0; i < n; ++i) bad |= !(values[i] - values[i] == 0.f);  // inf - inf and NaN are NaN
  return bad == 0;
}

// Whether all n gradient values may reach an update (optimizers::updatable).
inline bool all_updatable_parallel(const float* values, std::size_t n) noexcept {
  int bad = 0;
#pragma omp parallel for simd reduction(| : bad) if (n >= typeflow::parallel_threshold)
  for (std::size_t i = 0; i < n; ++i) bad |= !optimizers::updatable(values[i]);
  return bad == 0;
}

namespace detail {
inline std::string value_text(float v) { return std::isnan(v) ? "NaN" : (v > 0 ? "inf" : "-inf"); }
}  // namespace detail

// The error for a gradient region with a non-finite value: the first
// parameter (in arena order) that holds one, its element and value.
template <class Net>
non_finite_error non_finite_gradient(const float* gradients) {
  std::string name = "the parameter region's padding", where;
  bool found = false;
  parameter_table<Net>::for_each([&](const auto& p) {
    if (found || !p.trainable) return;  // a frozen parameter has no gradient
    const float* g = gradients + p.offset / sizeof(float);
    for (std::size_t i = 0; i < p.size && !found; ++i) {
      const std::size_t at = i / p.row_length * p.row_stride + i % p.row_length;
      if (!optimizers::updatable(g[at])) {
        name = p.name;
        where = std::isfinite(g[at]) ? " is too large to update with (" + std::to_string(g[at]) + " at element " +
                                           std::to_string(i) + " of " + std::to_string(p.size) +
                                           ": above 2^60, where an optimizer's arithmetic could overflow)"
                                     : " is not finite (" + detail::value_text(g[at]) + " at element " +
                                           std::to_string(i) + " of " + std::to_string(p.size) + ")";
        found = true;
      }
    }
  });
  return non_finite_error("the gradient of " + name + (found ? where : std::string(" is not finite")), name);
}

inline non_finite_error non_finite_loss(double loss) {
  return non_finite_error("the loss is not finite (" + detail::value_text(static_cast<float>(loss)) + ")", "loss");
}
// Across processes: another worker's loss, with this one's finite.
inline non_finite_error non_finite_loss_elsewhere(double own_loss) {
  return non_finite_error("the loss is not finite on another worker (this worker's is " + std::to_string(own_loss) +
                              "), so no worker updates",
                          "loss");
}

}  // namespace typeflow

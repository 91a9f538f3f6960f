// What every optimizer shares: the parameter table it updates, gradient
// clipping, and decoupled weight decay, in Keras 3's order:
//
//   1. clip the gradients (clipnorm per tensor, clipvalue, or global_clipnorm)
//   2. decay the weights: w -= lr * weight_decay * w   (where the kind allows)
//   3. apply the optimizer's own rule, element by element
//
// The rule runs over the whole parameter region as one flat array: padding
// and statistics have zero gradients, and each rule leaves a weight with a
// zero gradient and zero state unchanged (tests check this per optimizer).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "typeflow/backend/cpu/parallel.hpp"
#include "typeflow/model/layer.hpp"
#include "typeflow/schedules/schedules.hpp"

namespace typeflow::optimizers {

// One parameter tensor inside the flat regions, in floats from their start.
struct parameter_tensor {
  std::size_t offset = 0;
  std::size_t size = 0;
  param_kind kind = param_kind::kernel;
};

// Which tensors weight decay touches.
enum class decay_scope {
  kernels,  // kernels and embeddings: not biases, not normalization scales and offsets (the default)
  all,      // every trainable tensor, as plain Keras 3 does when no variable is excluded
};

constexpr bool decays(decay_scope scope, param_kind kind) {
  if (kind == param_kind::statistic) return false;
  return scope == decay_scope::all || kind == param_kind::kernel || kind == param_kind::embedding;
}

// Everything one update needs; built once per model, reused every step.
struct update_arguments {
  float* weights = nullptr;
  float* grads = nullptr;             // clipped in place
  float* const* slots = nullptr;      // each the same layout as weights
  std::ptrdiff_t floats = 0;          // the region's length, padding included
  std::span<const parameter_tensor> tensors;
  std::int64_t iteration = 1;         // 1-based: this update's number
};

// The fields Keras gives every optimizer. Each optimizer struct repeats them
// (designated initializers cannot reach into a base class) and passes itself
// to these helpers.
template <class O>
void check_common_options(const O& o) {
  std::string set;
  int clips = 0;
  for (auto [given, what] : {std::pair{o.clipnorm.has_value(), "clipnorm"}, std::pair{o.clipvalue.has_value(), "clipvalue"},
                             std::pair{o.global_clipnorm.has_value(), "global_clipnorm"}})
    if (given) set += (clips++ ? " and " : "") + std::string(what);
  if (clips > 1)
    throw std::invalid_argument(std::string(O::name) +
                                ": set at most one of clipnorm, clipvalue and global_clipnorm (" + set +
                                " are set)");
  auto positive = [](std::optional<float> v, const char* what) {
    if (v && !(*v > 0.f))
      throw std::invalid_argument(std::string(O::name) + ": " + what + " must be positive (got " +
                                  std::to_string(*v) + ")");
  };
  positive(o.clipnorm, "clipnorm");
  positive(o.clipvalue, "clipvalue");
  positive(o.global_clipnorm, "global_clipnorm");
  if (o.weight_decay < 0.f)
    throw std::invalid_argument(std::string(O::name) + ": weight_decay must not be negative (got " +
                                std::to_string(o.weight_decay) + ")");
}

namespace detail {
inline double squared_norm(const float* g, std::size_t n) {
  double sum = 0;
#pragma omp parallel for simd reduction(+ : sum) if (n >= 1 << 16)
  for (std::size_t i = 0; i < n; ++i) sum += double{g[i]} * g[i];
  return sum;
}
inline void scale(float* g, std::size_t n, float factor) {
  backend::cpu::parallel_for(static_cast<std::ptrdiff_t>(n), [=](std::ptrdiff_t i) { g[i] *= factor; });
}
}  // namespace detail

// Keras's clipping: clip_by_norm per tensor, clip_by_value, or
// clip_by_global_norm (g * c / max(norm, c), with no epsilon; PyTorch's
// clip_grad_norm_ divides by norm + 1e-6 instead).
template <class O>
void clip_gradients(const O& o, const update_arguments& a) {
  if (o.clipvalue) {
    const float limit = *o.clipvalue;
    float* g = a.grads;
    backend::cpu::parallel_for(a.floats, [=](std::ptrdiff_t i) { g[i] = std::clamp(g[i], -limit, limit); });
  } else if (o.clipnorm) {
    for (const auto& t : a.tensors) {
      if (t.kind == param_kind::statistic) continue;
      const double norm = std::sqrt(detail::squared_norm(a.grads + t.offset, t.size));
      if (norm > *o.clipnorm) detail::scale(a.grads + t.offset, t.size, static_cast<float>(*o.clipnorm / norm));
    }
  } else if (o.global_clipnorm) {
    double sum = 0;
    for (const auto& t : a.tensors)
      if (t.kind != param_kind::statistic) sum += detail::squared_norm(a.grads + t.offset, t.size);
    const double norm = std::sqrt(sum);
    if (norm > *o.global_clipnorm)
      detail::scale(a.grads, static_cast<std::size_t>(a.floats), static_cast<float>(*o.global_clipnorm / norm));
  }
}

// Decoupled weight decay, before the rule: w -= lr * weight_decay * w.
template <class O>
void decay_weights(const O& o, double learning_rate, const update_arguments& a) {
  if (o.weight_decay == 0.f) return;
  const float factor = static_cast<float>(1.0 - learning_rate * o.weight_decay);
  for (const auto& t : a.tensors)
    if (decays(o.weight_decay_applies_to, t.kind)) detail::scale(a.weights + t.offset, t.size, factor);
}

// The learning rate for this update: schedules count the updates before it.
template <class O>
double current_learning_rate(const O& o, std::int64_t iteration) {
  return o.learning_rate(iteration - 1);
}

}  // namespace typeflow::optimizers

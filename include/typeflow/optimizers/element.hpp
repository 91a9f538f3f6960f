// One parameter element's update, written once for both backends: the CPU's
// apply_update (update.hpp) runs it in its parallel loops, the CUDA backend's
// multi-tensor kernel (backend/cuda/optimizer.hpp) in its threads.
//
// Per element, in Keras 3's order:
//   1. clip the gradient: clipvalue clamps it; clipnorm (per tensor) and
//      global_clipnorm multiply it by a factor the host or the statistics
//      pass computed from the squared norms (norm_clip_factor);
//   2. decay the weight: w *= decay_factor(lr, weight_decay), where the
//      tensor's kind and the optimizer's decay_scope allow;
//   3. the optimizer's own rule, on (w, g, s), s the element's slot values.
//
// An optimizer gives its rule through `rule(iteration)`: a small trivially
// copyable functor with the per-step constants already computed on the host
// (Adam's bias-corrected step size, in double and then rounded to float),
// `slots()` (how many slot values it reads and writes, at most max_slots),
// and `operator()(float& w, float g, float* s) const`, both
// TYPEFLOW_HOST_DEVICE so that the CUDA kernel can run them. Options a rule
// branches on (Adam's amsgrad, SGD's momentum) are plain bools in the rule
// the device runs; a rule may offer `visit(f)`, calling f with a copy whose
// options are std::true_type / std::false_type, so that the CPU's loops hold
// no branch on them (with_fixed below does the dispatch), and slots() may
// return a std::integral_constant when it is known at compile time
// (slots_with below).
#pragma once

#include <concepts>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "typeflow/core/host_device.hpp"

namespace typeflow::optimizers {

// The most slot values a rule may keep per element (Adam with amsgrad keeps 3).
inline constexpr int max_slots = 4;

// ---------------------------------------------------------------------------
// Helpers for writing rules.

// An option is a bool at run time, or std::true_type / std::false_type once fixed.
template <class Option>
inline constexpr bool is_fixed_option = !std::is_same_v<Option, bool>;

// Base plus one slot per option that is on: an int, or a
// std::integral_constant<int, ...> when every option is fixed at compile time.
template <int Base, class... Options>
TYPEFLOW_HOST_DEVICE constexpr auto slots_with(Options... options) {
  if constexpr ((is_fixed_option<Options> && ...)) {
    ((void)options, ...);
    return std::integral_constant<int, (Base + ... + (Options::value ? 1 : 0))>{};
  } else {
    return (Base + ... + (static_cast<bool>(options) ? 1 : 0));
  }
}

// f(std::bool_constant<o>...) for run-time options o: one call, whose
// argument types carry the options' values.
template <class F>
void with_fixed(F&& f) {
  f();
}
template <class F, class... Rest>
void with_fixed(F&& f, bool first, Rest... rest) {
  if (first)
    with_fixed([&](auto... fixed) { f(std::true_type{}, fixed...); }, static_cast<bool>(rest)...);
  else
    with_fixed([&](auto... fixed) { f(std::false_type{}, fixed...); }, static_cast<bool>(rest)...);
}

// ---------------------------------------------------------------------------
// What an optimizer must give for apply_update and the device kernel.

template <class R>
concept element_rule = std::is_trivially_copyable_v<R> && std::default_initializable<R> &&
                       requires(const R& r, float& w, float g, float* s) {
                         { r.slots() } -> std::convertible_to<int>;
                         r(w, g, s);
                       };

template <class O>
concept rule_optimizer = requires(const O& o, std::int64_t iteration) {
  { o.rule(iteration) } -> element_rule;
  { o.learning_rate(iteration) } -> std::convertible_to<double>;
  { o.weight_decay } -> std::convertible_to<float>;
  o.weight_decay_applies_to;
  { *o.clipnorm } -> std::convertible_to<float>;
  { *o.clipvalue } -> std::convertible_to<float>;
  { *o.global_clipnorm } -> std::convertible_to<float>;
};

template <class O>
using rule_of = decltype(std::declval<const O&>().rule(std::int64_t{1}));

// The slot count a rule type fixes at compile time, or -1.
template <class R>
constexpr int fixed_slots() {
  using count = decltype(std::declval<const R&>().slots());
  if constexpr (requires { std::integral_constant<int, count::value>{}; })
    return count::value;
  else
    return -1;
}

// The learning rate of update number `iteration` (1-based): schedules count
// the updates before it.
template <class O>
double current_learning_rate(const O& o, std::int64_t iteration) {
  return o.learning_rate(iteration - 1);
}

// ---------------------------------------------------------------------------
// The per-element steps.

// a * b rounded to float, never fused with the addition that uses it: the
// clipped gradient and the decayed weight are rounded before the rule sees
// them, as when they were separate passes over memory (and the same on both
// backends). With FMA instructions, g++ would otherwise fuse across
// (-ffp-contract=fast, its default), and a paren or an asm barrier does not
// survive vectorisation; a fused multiply-add of -0 is exactly a*b rounded.
TYPEFLOW_HOST_DEVICE float rounded_product(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#elif defined(__FP_FAST_FMAF)
  return __builtin_fmaf(a, b, -0.f);
#else
  return a * b;
#endif
}

// Keras's optimizer EMA (optimizers/ema.hpp), on both devices: one element
// of the average, rounded as two products and a sum; and what update number
// `iteration` (1-based) does: momentum 0 at the first, and the weights
// overwritten by the average every `overwrite_frequency` updates (0: never).
TYPEFLOW_HOST_DEVICE float moving_average(float average, float w, float momentum) {
  return rounded_product(momentum, average) + rounded_product(1.f - momentum, w);
}
struct ema_step {
  float momentum;
  bool overwrite;
};
TYPEFLOW_HOST_DEVICE ema_step ema_step_for(std::int64_t iteration, float momentum, int overwrite_frequency) {
  return {iteration == 1 ? 0.f : momentum, overwrite_frequency > 0 && iteration % overwrite_frequency == 0};
}

enum class clip_kind : std::int32_t { none, value, norm, global_norm };

struct clip_options {
  clip_kind kind = clip_kind::none;
  float limit = 0.f;
};

// At most one is set (check_common_options).
template <class O>
clip_options clip_options_of(const O& o) {
  if (o.clipvalue) return {clip_kind::value, *o.clipvalue};
  if (o.clipnorm) return {clip_kind::norm, *o.clipnorm};
  if (o.global_clipnorm) return {clip_kind::global_norm, *o.global_clipnorm};
  return {};
}

// Keras's clip_by_norm / clip_by_global_norm factor: g * limit / max(norm,
// limit), no epsilon (PyTorch's clip_grad_norm_ divides by norm + 1e-6): the
// norm in double, limit / norm in double rounded to float, and 1 (no clip)
// at or below the limit, or when the norm is NaN.
TYPEFLOW_HOST_DEVICE float norm_clip_factor(double squared_norm, float limit) {
  const double norm = std::sqrt(squared_norm);
  return norm > limit ? static_cast<float>(limit / norm) : 1.f;
}

// Decoupled weight decay, w -= lr * weight_decay * w, as one factor: 1 - lr *
// weight_decay in double, rounded to float.
inline float decay_factor(double learning_rate, float weight_decay) {
  return weight_decay == 0.f ? 1.f : static_cast<float>(1.0 - learning_rate * weight_decay);
}

// kind: a clip_kind, or std::integral_constant<clip_kind, ...> in the CPU's
// loops. value: std::clamp(g, -limit, limit) (its comparisons, in its
// order); norm and global_norm: g * factor (factor 1: g unchanged).
template <class Kind = clip_kind>
TYPEFLOW_HOST_DEVICE float clip_gradient(float g, Kind kind, float limit, float factor) {
  if (kind == clip_kind::value) return g < -limit ? -limit : (limit < g ? limit : g);
  if (kind == clip_kind::none) return g;
  return rounded_product(g, factor);
}

// decays: bool, or std::true_type / std::false_type in the CPU's loops.
template <class Decays = bool>
TYPEFLOW_HOST_DEVICE float decay_weight(float w, Decays decays, float factor) {
  return decays ? rounded_product(w, factor) : w;
}

// One element: clip, decay, rule. s: the element's rule.slots() slot values.
template <class Rule, class Kind = clip_kind, class Decays = bool>
TYPEFLOW_HOST_DEVICE void update_element(float& w, float g, float* s, const Rule& rule, Kind clip, float clip_limit,
                                         float clip_factor, Decays decays, float decay_factor) {
  const float clipped = clip_gradient(g, clip, clip_limit, clip_factor);
  w = decay_weight(w, decays, decay_factor);
  rule(w, clipped, s);
}

// What one update needs that depends on the step: the rule, with its
// constants, and the decay factor.
template <class Rule>
struct step_values {
  Rule rule{};
  float decay_factor = 1.f;  // decay_factor(lr, weight_decay)
};

template <class O>
step_values<rule_of<O>> step_values_for(const O& o, std::int64_t iteration) {
  return {o.rule(iteration), decay_factor(current_learning_rate(o, iteration), o.weight_decay)};
}

}  // namespace typeflow::optimizers

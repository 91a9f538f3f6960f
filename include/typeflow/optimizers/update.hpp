// What every optimizer shares on the CPU: the parameter table it updates, the
// checks of Keras's common options, and apply_update, the one update every
// optimizer runs. Per element it does what element.hpp says (clip, decay,
// the optimizer's rule; the CUDA kernel runs the same functions), in one
// parallel pass over the region:
//
//   1. the squared norms clipping needs, in double (per tensor for
//      clipnorm, their sum in table order for global_clipnorm);
//   2. one loop per stretch of the region with one clipping factor and one
//      decay (a tensor, a run of tensors alike, or the padding between),
//      all inside one OpenMP team; the clipping kind, the decay and the
//      rule's own options are compile-time in each loop, so g++ vectorises it;
//      a tensor whose bf16 copy the caller keeps (tensor_copies) is updated
//      block by block, each block converted into the copy while in L1.
//
// The rule runs over the whole parameter region as one flat array: padding
// and statistics have zero gradients, and each rule leaves a weight with a
// zero gradient and zero state unchanged (tests check this per optimizer).
// clipvalue and global_clipnorm clip the padding and statistics too, as
// Keras clips every gradient it is given; clipnorm and the norms leave the
// statistics out.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "typeflow/core/parallel.hpp"
#include "typeflow/core/half.hpp"
#include "typeflow/contract/layer.hpp"
#include "typeflow/optimizers/element.hpp"
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
// The largest gradient magnitude the NaN policy lets an update use, 2^60:
// below it no rule's arithmetic can overflow (Adam's and RMSprop's squares
// stay under 2^120, SGD's step under 2^60 times the rate). A finite gradient
// of 1e30 (one feature of 1e30) passed the finiteness check, and Adam's
// square of it made weights of inf and NaN inside the update.
inline constexpr float largest_gradient = 1152921504606846976.f;  // 2^60

// Whether a gradient value may reach an update: finite and at most
// largest_gradient in magnitude (NaN fails the comparison).
inline bool updatable(float g) noexcept { return __builtin_fabsf(g) <= largest_gradient; }

struct update_arguments {
  float* weights = nullptr;
  float* grads = nullptr;             // clipped in place
  float* const* slots = nullptr;      // each the same layout as weights
  std::ptrdiff_t floats = 0;          // the region's length, padding included
  std::span<const parameter_tensor> tensors;
  std::int64_t iteration = 1;         // 1-based: this update's number
  // The NaN policy (train/non_finite.hpp), when set: the update's own pass
  // first reads every gradient and, if one is not finite or above
  // largest_gradient, changes nothing and sets *non_finite to 1 (else 0).
  // Fused so that the check costs one more read of data the update reads
  // next, not a pass of its own.
  int* non_finite = nullptr;
  // When set, parallel to `tensors`: the bf16 copy of each tensor that the
  // pass writes as it updates it (nullptr: none), e.g. the copies native
  // bf16 products read (precision/weight_copies.hpp). Only weights written
  // here are in registers: writing the copy costs a store, not a read.
  bf16* const* tensor_copies = nullptr;
  // An update of one shard of a region (zero<k>, optimizers/sharded_update.hpp):
  // the clipping norms are the whole tensors', which the shard alone cannot
  // compute. When set, clipnorm takes tensor_squared_norms[j] (parallel to
  // tensors) as tensor j's squared norm, and global_clipnorm takes
  // global_squared_norm (when >= 0) as the squared norm of all gradients.
  const double* tensor_squared_norms = nullptr;
  double global_squared_norm = -1;
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

// A stretch of the region that one loop covers: one clipping (none, value,
// or norm: a factor, the tensor's or the global one) and one decay.
struct update_segment {
  std::ptrdiff_t begin = 0, end = 0;
  clip_kind clip = clip_kind::none;
  float clip_factor = 1.f;
  bool decays = false;
  bf16* copy = nullptr;  // a tensor's bf16 copy (of element `begin`), written as it is updated
  bool same_kind(const update_segment& o) const {
    return clip == o.clip && clip_factor == o.clip_factor && decays == o.decays && !copy && !o.copy;
  }
};

// What the segments of one update are cut by.
struct segment_plan {
  std::span<const parameter_tensor> tensors;
  std::span<const std::size_t> order;  // tensors by offset; empty when the table is in order already
  std::span<const float> tensor_factors;  // clipnorm: each tensor's factor (1: no clip)
  std::ptrdiff_t floats = 0;
  clip_options clip;
  float global_factor = 1.f;  // global_clipnorm's factor (1: no clip)
  bool decaying = false;      // weight_decay != 0
  decay_scope scope = decay_scope::all;
  bf16* const* copies = nullptr;  // update_arguments::tensor_copies
};

// f(segment) over [0, floats) in order, adjacent stretches alike merged.
// Every thread of the team walks the same segments (their loops are
// worksharing constructs).
template <class F>
void for_each_segment(const segment_plan& p, F&& f) {
  const bool value = p.clip.kind == clip_kind::value;
  auto padding = [&](std::ptrdiff_t begin, std::ptrdiff_t end) {
    update_segment s{begin, end};
    if (value) s.clip = clip_kind::value;
    else if (p.global_factor != 1.f) s.clip = clip_kind::norm, s.clip_factor = p.global_factor;
    return s;
  };
  update_segment pending{};
  auto add = [&](const update_segment& s) {
    if (s.begin == s.end) return;
    if (pending.end == s.begin && pending.same_kind(s)) {
      pending.end = s.end;
      return;
    }
    if (pending.begin != pending.end) f(pending);
    pending = s;
  };
  std::ptrdiff_t covered = 0;
  const std::size_t count = p.tensors.size();
  for (std::size_t j = 0; j < count; ++j) {
    const std::size_t index = p.order.empty() ? j : p.order[j];
    const parameter_tensor& t = p.tensors[index];
    const auto begin = static_cast<std::ptrdiff_t>(t.offset), end = static_cast<std::ptrdiff_t>(t.offset + t.size);
    add(padding(covered, begin));
    update_segment s = padding(begin, end);
    if (p.clip.kind == clip_kind::norm && t.kind != param_kind::statistic && p.tensor_factors[index] != 1.f)
      s.clip = clip_kind::norm, s.clip_factor = p.tensor_factors[index];
    s.decays = p.decaying && decays(p.scope, t.kind);
    if (p.copies) s.copy = p.copies[index];
    add(s);
    covered = end;
  }
  add(padding(covered, p.floats));
  if (pending.begin != pending.end) f(pending);
}

// One element of update_loop. A function of its own, so that s is not a
// variable of the simd loop: OpenMP would give each lane a copy of it in
// memory, which the rule's s[k] then reaches by a gather, and g++ gives up
// vectorising. Inlined here, s becomes registers.
template <class Rule, class Kind, class Decays, class... Slots>
inline void update_one(std::ptrdiff_t i, float* w, const float* g, const Rule& rule, Kind clip, float clip_limit,
                       float clip_factor, Decays decays, float decay_factor, Slots*... slot) {
  float s[sizeof...(Slots) > 0 ? sizeof...(Slots) : 1];
  [[maybe_unused]] int j = 0;
  ((s[j++] = slot[i]), ...);
  update_element(w[i], g[i], s, rule, clip, clip_limit, clip_factor, decays, decay_factor);
  [[maybe_unused]] int k = 0;
  ((slot[i] = s[k++]), ...);
}

// Elements per block of a segment with a bf16 copy: a block's weights are
// converted right after their update, while they are in L1 (with g and the
// slots, 16 KiB for adam).
inline constexpr std::ptrdiff_t copy_block = 1024;

// One segment's elements, inside the team: clip, decay, rule, with the
// clipping kind, the decay and the rule's options compile-time. Everything
// the loop reads comes as values (registers), as parallel_for's copies.
// With a copy, the segment's weights in bf16 to it as well, by convert(),
// which gives the bits precision::from_float gives.
template <class Rule, class Kind, class Decays, class... Slots>
void update_loop(float* const w, const float* const g, std::ptrdiff_t begin, std::ptrdiff_t end, bf16* const copy,
                 const Rule rule, Kind clip, float clip_limit, float clip_factor, Decays decays, float decay_factor,
                 Slots* const... slot) {
  if (!copy) {
#pragma omp for simd schedule(static) nowait
    for (std::ptrdiff_t i = begin; i < end; ++i)
      update_one(i, w, g, rule, clip, clip_limit, clip_factor, decays, decay_factor, slot...);
    return;
  }
  const std::ptrdiff_t blocks = (end - begin + copy_block - 1) / copy_block;
#pragma omp for schedule(static) nowait
  for (std::ptrdiff_t b = 0; b < blocks; ++b) {
    const std::ptrdiff_t first = begin + b * copy_block;
    const std::ptrdiff_t last = first + copy_block < end ? first + copy_block : end;
#pragma omp simd
    for (std::ptrdiff_t i = first; i < last; ++i)
      update_one(i, w, g, rule, clip, clip_limit, clip_factor, decays, decay_factor, slot...);
    convert(w + first, copy + (first - begin), static_cast<std::size_t>(last - first));
  }
}

template <int Slots, class Rule>
void run_segment(const update_arguments& a, const update_segment& s, const Rule& rule, float clip_limit,
                 float decay_factor) {
  auto with_decay = [&](auto kind) {
    [&]<int... K>(std::integer_sequence<int, K...>) {
      if (s.decays)
        update_loop(a.weights, a.grads, s.begin, s.end, s.copy, rule, kind, clip_limit, s.clip_factor,
                    std::true_type{}, decay_factor, a.slots[K]...);
      else
        update_loop(a.weights, a.grads, s.begin, s.end, s.copy, rule, kind, clip_limit, s.clip_factor,
                    std::false_type{}, decay_factor, a.slots[K]...);
    }(std::make_integer_sequence<int, Slots>{});
  };
  switch (s.clip) {
    case clip_kind::value: with_decay(std::integral_constant<clip_kind, clip_kind::value>{}); break;
    case clip_kind::none: with_decay(std::integral_constant<clip_kind, clip_kind::none>{}); break;
    default: with_decay(std::integral_constant<clip_kind, clip_kind::norm>{}); break;
  }
}

template <int Slots, class Rule>
void run_update(const update_arguments& a, const segment_plan& plan, const Rule& rule, float decay_factor) {
  int bad = 0;
  const bool check = a.non_finite != nullptr;
  const float* const g = a.grads;
  const std::ptrdiff_t n = a.floats;
#pragma omp parallel if (a.floats >= typeflow::parallel_threshold)
  {
    if (check) {
      // The for's barrier makes the verdict every thread's before any update.
#pragma omp for simd schedule(static) reduction(| : bad)
      for (std::ptrdiff_t i = 0; i < n; ++i) bad |= !updatable(g[i]);
    }
    if (!bad) {
      const Rule local = rule;  // each thread its own copy, as parallel_for
      for_each_segment(plan, [&](const update_segment& s) { run_segment<Slots>(a, s, local, plan.clip.limit, decay_factor); });
    }
  }
  if (check) *a.non_finite = bad != 0;
}

template <class Rule>
void run_rule(const update_arguments& a, const segment_plan& plan, const Rule& rule, float decay_factor) {
  constexpr int fixed = fixed_slots<Rule>();
  if constexpr (fixed >= 0) {
    static_assert(fixed <= max_slots, "an optimizer rule keeps at most optimizers::max_slots slot values");
    run_update<fixed>(a, plan, rule, decay_factor);
  } else {
    switch (static_cast<int>(rule.slots())) {
      case 0: run_update<0>(a, plan, rule, decay_factor); break;
      case 1: run_update<1>(a, plan, rule, decay_factor); break;
      case 2: run_update<2>(a, plan, rule, decay_factor); break;
      case 3: run_update<3>(a, plan, rule, decay_factor); break;
      case 4: run_update<4>(a, plan, rule, decay_factor); break;
      default: throw std::invalid_argument("apply_update: a rule keeps at most optimizers::max_slots slot values");
    }
    static_assert(max_slots == 4, "run_rule: one case per slot count");
  }
}

// Per-thread scratch for what a step computes but keeps no longer: reused,
// so that steps after the first allocate nothing.
template <class T>
std::vector<T>& scratch(std::size_t n) {
  thread_local std::vector<T> buffer;
  buffer.resize(n);
  return buffer;
}

}  // namespace detail

// The update every optimizer with a rule runs on the CPU: clip, decay and
// rule per element (element.hpp), as the CUDA kernel runs them.
template <rule_optimizer O>
void apply_update(const O& o, const update_arguments& a) {
  const step_values<rule_of<O>> values = step_values_for(o, a.iteration);
  detail::segment_plan plan;
  plan.tensors = a.tensors;
  plan.floats = a.floats;
  plan.clip = clip_options_of(o);
  plan.decaying = o.weight_decay != 0.f;
  plan.scope = o.weight_decay_applies_to;
  plan.copies = a.tensor_copies;

  // The tensors in offset order, inside the region, none overlapping.
  bool sorted = true;
  for (std::size_t j = 1; j < a.tensors.size() && sorted; ++j) sorted = a.tensors[j - 1].offset <= a.tensors[j].offset;
  if (!sorted) {
    std::vector<std::size_t>& order = detail::scratch<std::size_t>(a.tensors.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t x, std::size_t y) { return a.tensors[x].offset < a.tensors[y].offset; });
    plan.order = order;
  }
  std::size_t covered = 0;
  for (std::size_t j = 0; j < a.tensors.size(); ++j) {
    const parameter_tensor& t = a.tensors[plan.order.empty() ? j : plan.order[j]];
    if (t.offset < covered || t.offset + t.size > static_cast<std::size_t>(a.floats))
      throw std::invalid_argument(std::string(O::name) + ": parameter tensors overlap or leave the region");
    covered = t.offset + t.size;
  }

  if (plan.clip.kind == clip_kind::norm) {
    std::vector<float>& factors = detail::scratch<float>(a.tensors.size());
    for (std::size_t j = 0; j < a.tensors.size(); ++j) {
      const parameter_tensor& t = a.tensors[j];
      if (t.kind == param_kind::statistic) {
        factors[j] = 1.f;
        continue;
      }
      const double squared =
          a.tensor_squared_norms ? a.tensor_squared_norms[j] : detail::squared_norm(a.grads + t.offset, t.size);
      factors[j] = norm_clip_factor(squared, plan.clip.limit);
    }
    plan.tensor_factors = factors;
  } else if (plan.clip.kind == clip_kind::global_norm) {
    double sum = a.global_squared_norm;
    if (sum < 0) {
      sum = 0;
      for (const auto& t : a.tensors)
        if (t.kind != param_kind::statistic) sum += detail::squared_norm(a.grads + t.offset, t.size);
    }
    plan.global_factor = norm_clip_factor(sum, plan.clip.limit);
  }

  auto run = [&](const auto& rule) { detail::run_rule(a, plan, rule, values.decay_factor); };
  if constexpr (requires { values.rule.visit(run); })
    values.rule.visit(run);
  else
    run(values.rule);
}

}  // namespace typeflow::optimizers

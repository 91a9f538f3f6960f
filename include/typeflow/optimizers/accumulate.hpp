// accumulate<K>(optimizer): gradient accumulation, as Keras 3's
// gradient_accumulation_steps.
//
//   Each micro-batch's gradient is added to an accumulator; on every K-th
//   micro-batch the wrapped optimizer sees the mean of the K gradients and
//   then clips, decays and updates as usual (apply_update, update.hpp). Its learning-rate schedule and
//   the model's iterations() count updates, not micro-batches, so K micro-
//   batches of B give the same weights as one batch of K * B.
//
// The accumulator is one more slot of the parameter region's size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "typeflow/optimizers/sharded_update.hpp"
#include "typeflow/optimizers/update.hpp"

namespace typeflow::optimizers {

template <int K, class Optimizer>
struct accumulated {
  static_assert(K >= 1, "accumulate<K>: K, the number of micro-batches per update, must be at least 1");

  Optimizer inner;
  int micro_batches = 0;  // since the last update

  static constexpr std::string_view name = Optimizer::name;
  static constexpr int steps = K;

  int slot_count() const { return inner.slot_count() + 1; }  // the inner slots, then the accumulator
  void validate() const { inner.validate(); }
  double learning_rate(std::int64_t step) const { return inner.learning_rate(step); }

  // Returns whether this micro-batch completed an update.
  // With a.non_finite set, a micro-batch with a gradient that is not
  // finite, or above largest_gradient, adds nothing (and sets it), so the
  // accumulator stays finite.
  bool accumulate_and_update(const update_arguments& a) {
    float* sum = a.slots[inner.slot_count()];
    float* g = a.grads;
    if (a.non_finite) {
      int bad = 0;
      const std::ptrdiff_t n = a.floats;
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (n >= typeflow::parallel_threshold)
      for (std::ptrdiff_t i = 0; i < n; ++i) bad |= !updatable(g[i]);
      *a.non_finite = bad != 0;
      if (bad) return false;
    }
    if (micro_batches == 0)
      typeflow::parallel_for(a.floats, [=](std::ptrdiff_t i) { sum[i] = g[i]; });
    else
      typeflow::parallel_for(a.floats, [=](std::ptrdiff_t i) { sum[i] += g[i]; });
    if (++micro_batches < K) return false;
    micro_batches = 0;
    constexpr float mean = 1.f / K;
    typeflow::parallel_for(a.floats, [=](std::ptrdiff_t i) { g[i] = sum[i] * mean; });
    if constexpr (rule_optimizer<Optimizer>)
      apply_update(inner, a);  // the same update as without accumulation
    else
      inner.update(a);
    return true;
  }

  // The same over a region in shards (zero<k>, sharded_update.hpp), each
  // shard's accumulator on its replica; the engine has checked the
  // gradients of every shard before.
  bool accumulate_and_update_shards(const sharded_update& u) {
    const bool first = micro_batches == 0;
    auto add = [&](int s) {
      const update_arguments& a = u.arguments[static_cast<std::size_t>(s)];
      float* sum = a.slots[inner.slot_count()];
      const float* g = a.grads;
      if (first)
        typeflow::parallel_for(a.floats, [=](std::ptrdiff_t i) { sum[i] = g[i]; });
      else
        typeflow::parallel_for(a.floats, [=](std::ptrdiff_t i) { sum[i] += g[i]; });
    };
    u.run(add);
    if (++micro_batches < K) return false;
    micro_batches = 0;
    auto mean_of_sums = [&](int s) {
      const update_arguments& a = u.arguments[static_cast<std::size_t>(s)];
      const float* sum = a.slots[inner.slot_count()];
      float* g = a.grads;
      constexpr float mean = 1.f / K;
      typeflow::parallel_for(a.floats, [=](std::ptrdiff_t i) { g[i] = sum[i] * mean; });
    };
    u.run(mean_of_sums);
    apply_sharded_update(inner, u);  // a rule optimizer's only (updates_in_shards)
    return true;
  }
};

// accumulate<K>(optimizer): the optimizer, updating once every K micro-batches.
template <int K, class Optimizer>
constexpr accumulated<K, Optimizer> accumulate(Optimizer optimizer) {
  return accumulated<K, Optimizer>{std::move(optimizer)};
}

}  // namespace typeflow::optimizers

// What the CUDA backend's optimizer step needs beyond the shared update, in
// plain C++ (no CUDA headers): the layout its kernels walk (the update plan's
// chunks), the statistics they reduce into, the per-step constants in device
// memory (step tables) and the step state (update counter, loss scale).
// The arithmetic itself is the CPU's: each optimizer's rule(iteration), the
// per-element clip, decay and update_element and the clipping factors
// (element.hpp), and loss-scale state machine (precision/loss_scale.hpp).
// backend/cuda/optimizer.hpp launches the kernels;
// tests/unit/cuda_shared_math_test.cpp checks the layouts.
//
// One step on the device, every piece capturable in a CUDA graph:
//   1. gradient_statistics: unscale by step_state::inverse_loss_scale, the
//      all-finite flag, squared norms (global and per tensor), one pass;
//   2. apply_update: skips when loss scaling is on and a gradient was not
//      finite; else update_element on every element;
//   3. finish_step: the loss-scale state machine and the update counter
//      (as train/cpu_engine.hpp advances them), and a report for the host.
// The learning-rate-dependent constants reach the kernels through a
// step_table in device memory that the host rewrites before each step.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "typeflow/core/host_device.hpp"
#include "typeflow/optimizers/element.hpp"
#include "typeflow/optimizers/update.hpp"
#include "typeflow/precision/loss_scale.hpp"

namespace typeflow::optimizers::device {

// ---------------------------------------------------------------------------
// Layout: the flat region cut into chunks, each inside one tensor or one gap
// between tensors. A chunk is the unit of the deterministic reduction (its
// partial sum does not depend on the grid), and tells the update kernel its
// tensor without a search.

struct tensor_entry {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::uint32_t first_chunk = 0;  // its chunks are [first_chunk, first_chunk + chunk_count)
  std::uint32_t chunk_count = 0;
  std::uint32_t normed = 0;  // counts in norms and clipnorm (not a statistic), as apply_update
  std::uint32_t decays = 0;  // weight decay applies (decays(scope, kind))
};

struct chunk {
  std::uint64_t begin = 0;
  std::uint32_t length = 0;
  std::int32_t tensor = -1;  // index into the tensor table; -1 for padding between tensors
};

struct update_plan {
  std::uint64_t floats = 0;
  std::vector<tensor_entry> tensors;  // in the order given, so indices match the parameter table
  std::vector<chunk> chunks;          // ascending, covering [0, floats) exactly, or the plan's range
  // Where the slots begin in the region: a plan over the range [begin, end)
  // (zero<k>'s shard) reads slot element i at slots[i - slot_origin], its
  // slots holding that range alone; 0 for the whole region.
  std::uint64_t slot_origin = 0;
};

inline constexpr std::uint32_t default_chunk_floats = 8192;

// Region floats [begin, end): a plan's range.
struct plan_range {
  std::size_t begin = 0;
  std::size_t end = static_cast<std::size_t>(-1);  // the region's end
};

// The plan of the whole region, or with `range` of [range.begin, range.end)
// alone (zero<k>'s shard): the tensor table stays the whole region's (its
// indices the parameter table's; a tensor's chunks are its chunks inside
// the range, none for a tensor outside it), the chunks cover the range
// exactly, and the slots begin at the range (slot_origin). The chunks a
// range holds are the whole plan's cut again at its bounds, so the plans of
// ranges that tile the region together update every element once.
// Throws std::invalid_argument when tensors overlap or leave the region,
// or the range does not lie in it.
inline update_plan make_update_plan(std::span<const parameter_tensor> tensors, std::size_t floats, decay_scope scope,
                                    std::uint32_t chunk_floats = default_chunk_floats, plan_range range = {}) {
  if (chunk_floats == 0) throw std::invalid_argument("make_update_plan: chunk_floats must be positive");
  const std::uint64_t lowest = range.begin, highest = std::min<std::uint64_t>(range.end, floats);
  if (lowest > highest)
    throw std::invalid_argument("make_update_plan: the range [" + std::to_string(range.begin) + ", " +
                                std::to_string(range.end) + ") does not lie in the region of " +
                                std::to_string(floats) + " floats");
  update_plan plan;
  plan.floats = floats;
  plan.slot_origin = lowest;
  plan.tensors.resize(tensors.size());
  std::vector<std::size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return tensors[a].offset < tensors[b].offset; });
  auto add_chunks = [&](std::uint64_t begin, std::uint64_t end, std::int32_t tensor) {
    for (std::uint64_t at = begin; at < end; at += chunk_floats) {
      const std::uint64_t from = std::max(at, lowest), to = std::min({at + chunk_floats, end, highest});
      if (from < to) plan.chunks.push_back({from, static_cast<std::uint32_t>(to - from), tensor});
    }
  };
  std::uint64_t covered = 0;
  for (std::size_t index : order) {
    const parameter_tensor& t = tensors[index];
    if (t.offset < covered || t.offset > floats || t.size > floats - t.offset)
      throw std::invalid_argument("make_update_plan: tensor " + std::to_string(index) + " (offset " +
                                  std::to_string(t.offset) + ", size " + std::to_string(t.size) +
                                  ") overlaps another or leaves the region of " + std::to_string(floats) + " floats");
    add_chunks(covered, t.offset, -1);
    tensor_entry& e = plan.tensors[index];
    e.offset = t.offset;
    e.size = t.size;
    e.first_chunk = static_cast<std::uint32_t>(plan.chunks.size());
    add_chunks(t.offset, t.offset + t.size, static_cast<std::int32_t>(index));
    e.chunk_count = static_cast<std::uint32_t>(plan.chunks.size()) - e.first_chunk;
    e.normed = t.kind != param_kind::statistic;
    e.decays = decays(scope, t.kind);
    covered = t.offset + t.size;
  }
  add_chunks(covered, floats, -1);
  if (plan.chunks.size() > 0x7fffffffu) throw std::invalid_argument("make_update_plan: too many chunks");
  return plan;
}

// ---------------------------------------------------------------------------
// Statistics: one pass over the gradients.

struct gradient_statistics {
  double squared_norm = 0;      // over tensors that are not statistics, after unscaling
  std::int32_t all_finite = 1;  // every gradient of the region was finite before unscaling
  std::int32_t reserved = 0;
};

// A bit test, which no fast-math flag can fold away (loss_scale.hpp's
// x - x == 0 is the same predicate).
TYPEFLOW_HOST_DEVICE bool is_finite_bits(float x) {
  return (std::bit_cast<std::uint32_t>(x) & 0x7f800000u) != 0x7f800000u;
}
// The NaN policy's test, optimizers::updatable's on the CPU: finite and at
// most 2^60 in magnitude (NaN and infinity have larger magnitude bits).
inline constexpr std::uint32_t largest_gradient_bits = 0x5D800000u;  // 2^60
static_assert(std::bit_cast<std::uint32_t>(largest_gradient) == largest_gradient_bits);
TYPEFLOW_HOST_DEVICE bool updatable_bits(float x) {
  return (std::bit_cast<std::uint32_t>(x) & 0x7fffffffu) <= largest_gradient_bits;
}

// ---------------------------------------------------------------------------
// The per-step values: the rule and the decay factor (step_values).
//
// Steps whose update number the host cannot know yet: under loss scaling a
// skipped step does not count (train/cpu_engine.hpp), and the host learns of a
// skip only when that step's report comes back. So it writes the values of
// every number the device may be at, first_iteration .. + count - 1, and
// the kernel picks step_state::iterations + 1.
inline constexpr int step_table_capacity = 16;

struct step_table_header {
  std::int64_t first_iteration = 1;
  std::int32_t count = 0;
  std::int32_t reserved = 0;
  // Where update number `iteration` sits in the table, or -1 when it misses.
  TYPEFLOW_HOST_DEVICE int index_of(std::int64_t iteration) const {
    const std::int64_t j = iteration - first_iteration;
    return j >= 0 && j < count ? static_cast<int>(j) : -1;
  }
};

template <class Rule>
struct step_table {
  step_table_header header;  // first, so that finish_step reads it whatever Rule is
  step_values<Rule> values[step_table_capacity];

  TYPEFLOW_HOST_DEVICE const step_values<Rule>* find(std::int64_t iteration) const {
    const int j = header.index_of(iteration);
    return j >= 0 ? &values[j] : nullptr;
  }
};

// The values of update numbers first_iteration .. + count - 1, as
// apply_update computes them on the CPU (step_values_for).
template <rule_optimizer O>
step_table<rule_of<O>> step_table_for(const O& o, std::int64_t first_iteration, int count) {
  if (count < 1 || count > step_table_capacity)
    throw std::invalid_argument("step_table_for: count must lie in [1, " + std::to_string(step_table_capacity) +
                                "] (got " + std::to_string(count) + ")");
  step_table<rule_of<O>> table;
  table.header.first_iteration = first_iteration;
  table.header.count = count;
  for (int j = 0; j < count; ++j) table.values[j] = step_values_for(o, first_iteration + j);
  return table;
}

// ---------------------------------------------------------------------------
// The step's state in device memory: the loss-scale state machine's state
// (precision::loss_scale_state: loss_scale, skipped, ...), the update
// counter, and what the kernels read or report.

struct step_state : precision::loss_scale_state {
  std::int64_t iterations = 0;     // updates applied (training_state::iterations)
  std::int64_t steps = 0;          // steps finished, applied or not
  float inverse_loss_scale = 1.f;  // 1 / loss_scale: what gradient_statistics multiplies by
  std::int32_t last_applied = 1;
  // Whether the last step's gradients were all updatable (updatable_bits).
  // A step that was not applies no update under every policy: loss scaling
  // skips it, and otherwise the engine stops training (the NaN policy).
  std::int32_t last_finite = 1;
  std::int32_t table_missed = 0;  // a step found no step_table entry for its update number (a host bug)
  // accumulate<K> (optimizers/accumulate.hpp): K (0: no accumulation), the
  // micro-batches added since the last update, whether this step's update
  // completes one (always, without accumulation), and what the accumulation
  // pass does this step (accumulate_mode's bits, begin_accumulation's).
  std::int32_t micro_batches_per_update = 0;
  std::int32_t micro_batches = 0;
  std::int32_t accumulation_complete = 1;
  std::int32_t accumulate_mode = 0;
};

// accumulate_mode's bits: the micro-batch's gradient is added; it is the
// first since the last update (copied, not added); the update completes
// (the gradients become the mean of the K).
inline constexpr std::int32_t accumulate_add = 1, accumulate_first = 2, accumulate_average = 4;

// accumulate<K>'s decision for one step, before the accumulation pass: the
// CPU's accumulate_and_update as a state machine. A step whose gradients
// are not all updatable adds nothing (the CPU's accumulator refuses them
// too, under every policy), and completes no update.
TYPEFLOW_HOST_DEVICE void begin_accumulation(step_state& s, bool all_finite) {
  if (s.micro_batches_per_update <= 0) return;
  if (!all_finite) {
    s.accumulate_mode = 0;
    s.accumulation_complete = 0;
    return;
  }
  const bool first = s.micro_batches == 0;
  const bool complete = ++s.micro_batches >= s.micro_batches_per_update;
  if (complete) s.micro_batches = 0;
  s.accumulation_complete = complete;
  s.accumulate_mode = accumulate_add | (first ? accumulate_first : 0) | (complete ? accumulate_average : 0);
}

// One element of the accumulation pass: the accumulator `sum` takes the
// gradient g (as the CPU: sum = g on the first, sum += g after); returns the
// gradient the update reads, sum * (1 / K) when the update completes.
TYPEFLOW_HOST_DEVICE float accumulate_element(float& sum, float g, std::int32_t mode, float mean) {
  if (!(mode & accumulate_add)) return g;
  sum = (mode & accumulate_first) ? g : sum + g;
  return (mode & accumulate_average) ? sum * mean : g;
}

inline step_state with_loss_scale(const precision::loss_scale& checked) {
  step_state s;
  static_cast<precision::loss_scale_state&>(s) = checked.state();
  s.inverse_loss_scale = 1.f / s.loss_scale;
  return s;
}
inline step_state make_step_state() { return {}; }  // float32: no loss scaling
inline step_state make_step_state(precision::dynamic_loss_scale o) { return with_loss_scale(precision::loss_scale(o)); }
inline step_state make_step_state(precision::fixed_loss_scale o) { return with_loss_scale(precision::loss_scale(o)); }

// Whether apply_update changes anything this step.
TYPEFLOW_HOST_DEVICE bool update_applies(const step_state& s, bool all_finite) {
  return s.accumulation_complete != 0 && all_finite;
}

// After the update: loss_scale_state::after_step, and ++iterations when
// applied. `applied` is false also when the step table missed (nothing was
// changed).
TYPEFLOW_HOST_DEVICE void finish_step(step_state& s, bool all_finite, bool applied) {
  ++s.steps;
  s.last_finite = all_finite;
  s.after_step(all_finite);
  if (s.skip_non_finite) s.inverse_loss_scale = 1.f / s.loss_scale;
  s.last_applied = applied;
  if (applied) ++s.iterations;
}

// What the host reads back after each step (pinned memory).
struct step_report {
  std::int64_t step = 0;        // step_state::steps after it: 1, 2, ...
  std::int64_t iterations = 0;  // updates applied so far
  std::int64_t skipped = 0;
  double squared_norm = 0;
  float loss_scale = 1.f;  // the scale the next step uses
  std::int32_t all_finite = 1;
  std::int32_t applied = 1;
  std::int32_t table_missed = 0;
};

TYPEFLOW_HOST_DEVICE step_report make_report(const step_state& s, const gradient_statistics& g) {
  step_report r;
  r.step = s.steps;
  r.iterations = s.iterations;
  r.skipped = s.skipped;
  r.squared_norm = g.squared_norm;
  r.loss_scale = s.loss_scale;
  r.all_finite = g.all_finite;
  r.applied = s.last_applied;
  r.table_missed = s.table_missed;
  return r;
}

}  // namespace typeflow::optimizers::device

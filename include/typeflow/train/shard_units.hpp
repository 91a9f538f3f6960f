// zero<3>'s units over one shard, shared by its two owners: the replicas of
// one process (train/cpu_replicas.hpp) and the workers of a job
// (train/cpu_worker_shards.hpp). A unit is a range [from, to) of floats of
// the trainable region (distribute/layer_groups.hpp); what a gather copies,
// a free gives back and a reduce keeps is cut from it by the owner's shard
// and by batch_norm's moving statistics, which are each replica's own and
// never gathered nor freed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "typeflow/optimizers/update.hpp"
#include "typeflow/train/arena.hpp"
#include "typeflow/train/gather_window.hpp"
#include "typeflow/train/parameter_table.hpp"

namespace typeflow {

// The statistics inside the trainable region, as (offset, floats), in order.
template <class Net>
std::vector<std::pair<std::size_t, std::size_t>> trainable_statistics() {
  std::vector<std::pair<std::size_t, std::size_t>> statistics;
  for (const optimizers::parameter_tensor& t : parameter_table<Net>::tensors())
    if (t.kind == param_kind::statistic && t.offset < Net::trainable_floats) statistics.emplace_back(t.offset, t.size);
  std::sort(statistics.begin(), statistics.end());
  return statistics;
}

// Calls f(a, b) for the parts of [from, to) outside the shard [own_begin, own_end).
template <class F>
void outside_own(std::size_t own_begin, std::size_t own_end, std::size_t from, std::size_t to, F&& f) {
  if (from < std::min(to, own_begin)) f(from, std::min(to, own_begin));
  if (std::max(from, own_end) < to) f(std::max(from, own_end), to);
}

// Calls f(at, n) for the runs of [from, to) outside the statistics.
template <class F>
void without_statistics(std::span<const std::pair<std::size_t, std::size_t>> statistics, std::size_t from,
                        std::size_t to, F&& f) {
  std::size_t at = from;
  for (const auto& [s, n] : statistics) {
    if (s + n <= at || s >= to) continue;
    if (s > at) f(at, s - at);
    at = std::max(at, s + n);
  }
  if (at < to) f(at, to - at);
}

// A top-level layer's weights as its unit gathers and frees them: a tied
// matrix first (tied_logits' embedding, in the window's tied part), then its
// own; f(from, to, part) for each.
template <class Groups, class F>
void for_each_layer_range(std::size_t i, F&& f) {
  if (const std::size_t tied = Groups::tied_source[i]; tied < Groups::count)
    f(Groups::own[tied].begin, Groups::own[tied].end, gather_window::tied_weights);
  f(Groups::own[i].begin, Groups::own[i].end, Groups::is_tied_source[i] ? gather_window::tied_weights
                                                                       : gather_window::weights);
}

// Before a unit's backward: its gradients outside the shard, floats [a, b)
// of the gradient region at gradients_offset, noted in the window and
// zeroed where the window holds them (freed pages read as zero).
inline void open_gradients(gather_window& window, arena& memory, std::size_t gradients_offset, std::size_t a,
                           std::size_t b) {
  constexpr std::size_t page = gather_window::page;
  const std::size_t offset = gradients_offset + a * sizeof(float), bytes = (b - a) * sizeof(float);
  window.note(gather_window::gradients, offset, bytes);
  const std::size_t first = (offset + page - 1) / page * page, last = (offset + bytes) / page * page;
  if (first < last && memory.aliased(first)) std::memset(memory.data() + first, 0, last - first);
}

}  // namespace typeflow

// rank_memory<Net, Strategy, Batch, Device>: the bytes one replica (rank)
// holds when Net trains at global batch Batch under Strategy on Device
// (tf::cpu unless named), at compile time; the
// device budget (train/device_budget.hpp) applies to it, and summary() prints
// it for a zero<> strategy.
//
//   parameters      every replica holds all of them; under zero<3> its shard
//                   of the trainable ones (and the frozen ones whole)
//   gradients       all trainable floats, or under zero<2|3, mirrored<N>> its
//                   shard: each unit's (layer's) are reduced as its backward
//                   ends and the rest freed. (zero<2|3, multi_worker> does
//                   the same, but the plan cannot know the workers: it
//                   counts the whole region, an upper bound. On tf::cuda
//                   the region stays whole: the backward writes it all.)
//   slots           per optimizer slot, on the replica that holds the most:
//                   all trainable floats on replica 0 (single_device,
//                   mirrored<N>: replicas 1..N-1 hold none), or one shard on
//                   every replica (zero<k>)
//   gathered        zero<2|3, mirrored<N>>'s: the most gradients held beyond
//                   the shard, and zero<3>'s most weights gathered for one
//                   unit (its own and a tied matrix)
//                   (distribute/layer_groups.hpp); 0 otherwise
//   activations     the step region of the replica's share of the batch
//                   (Batch / N samples): activations, their gradients,
//                   workspaces, scratch and loss rows
//
// bytes(slots) is the sum with `slots` optimizer slots: the largest replica's
// arena on the CPU (train/cpu_replicas.hpp lays the replicas out so).
//
// zero<k, multi_worker>: the worker count is known only at run time, so the
// compile-time figures (and a budget) are those of a job of one worker, whose
// shard is the whole region: an upper bound. rank_memory_rows() gives each
// worker's shard once the job's size is known.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "typeflow/backend/device.hpp"
#include "typeflow/distribute/layer_groups.hpp"
#include "typeflow/distribute/zero.hpp"
#include "typeflow/model/memory_plan.hpp"

namespace typeflow {

template <class Net, class Strategy, int Batch, class Device = cpu>
struct rank_memory {
  static constexpr int replicas = Strategy::replicas;
  static constexpr int stage = zero_stage_v<Strategy>;
  // Each replica's share (the strategy's own error refuses a batch N does not divide).
  static constexpr int batch_per_replica = Batch % replicas == 0 ? Batch / replicas : Batch;
  using plan = memory_plan<Net, batch_per_replica, 0>;
  using shards = region_shards<Net::trainable_floats, replicas>;

  // Within one process (mirrored<N>) on the CPU zero<2|3> reduce unit by unit.
  static constexpr bool on_cpu = std::is_same_v<Device, cpu>;
  static constexpr bool reduces_per_unit = stage >= 2 && !Strategy::across_processes && replicas >= 2 && on_cpu;
  // Within one process zero<3> shards the weights; across processes the
  // plan, which cannot know the workers, counts them whole (an upper bound).
  static constexpr bool gathers = stage >= 3 && !Strategy::across_processes && on_cpu;
  static constexpr std::size_t parameter_bytes =
      gathers ? shards::shard_bytes + (plan::parameter_bytes - plan::trainable_bytes) : plan::parameter_bytes;
  static constexpr std::size_t gradient_bytes = reduces_per_unit ? shards::shard_bytes : plan::trainable_bytes;
  static constexpr std::size_t reduced_gradient_bytes = stage >= 2 ? shards::shard_bytes : plan::trainable_bytes;
  static constexpr std::size_t slot_bytes = stage >= 1 ? shards::shard_bytes : plan::trainable_bytes;
  static constexpr std::size_t gathered_bytes =
      ((gathers ? layer_groups<Net>::largest_parameters : 0) +
       (reduces_per_unit ? layer_groups<Net>::largest_gradients : 0)) * sizeof(float);
  static constexpr std::size_t activation_bytes = plan::per_step_bytes;

  // Without the optimizer's slots (known when compile() runs): the plan's
  // total, or under zero<2|3, mirrored<N>> what its replica holds of it (the
  // arena keeps the plan's layout, its freed pages holding no memory).
  static constexpr std::size_t bytes_before_slots = parameter_bytes + gradient_bytes + gathered_bytes + activation_bytes;
  static_assert(reduces_per_unit || bytes_before_slots == plan::total_bytes,
                "rank_memory: the regions add up to the memory plan's");
  static constexpr std::size_t bytes(int slots) {
    return bytes_before_slots + static_cast<std::size_t>(slots) * slot_bytes;
  }
};

namespace distribute {

// What each replica holds whatever the batch size, as (what, bytes) rows:
// summary() prints them under a zero<> strategy, settings() lists them.
// `slots` < 0 before compile(). `workers`: the shards' count where it is
// known only at run time (zero<k, multi_worker>: the job's workers), 0 where
// it is not known at all (summary_text(), before any model exists).
template <class Net, class Strategy, class Device = cpu>
std::vector<std::pair<std::string, std::string>> rank_memory_rows(int slots, int workers = Strategy::replicas) {
  using memory = rank_memory<Net, Strategy, 0, Device>;
  const auto bytes = [](std::size_t n) {
    std::string digits = std::to_string(n), out;
    for (std::size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
      out += digits[i];
    }
    return out + " bytes";
  };
  // One shard of the trainable region, or all of it where nothing is sharded.
  const bool known = workers > 0;
  const std::size_t shard = memory::stage >= 1 && known ? shard_length(Net::trainable_floats, workers) * sizeof(float)
                                                        : memory::slot_bytes;
  const std::string unknown =
      "one shard per worker, the trainable region's " + bytes(memory::gradient_bytes) + " / workers";
  std::vector<std::pair<std::string, std::string>> rows{{"parameters", bytes(memory::parameter_bytes)}};
  std::string gradients = bytes(memory::gradient_bytes);
  if (memory::gathers) rows.back().second += " (its shard)";
  const std::string its_shard = known ? bytes(shard) : unknown;
  if (memory::stage >= 3 && Strategy::across_processes) {  // zero<3, multi_worker>: at most the whole region
    rows.back().second += " at most (its shard of the trainable ones, " + its_shard + ", and one layer's gathered)";
    gradients += " at most (its shard of the mean, " + its_shard + ", and one layer's as backward goes)";
  } else if (memory::reduces_per_unit)
    gradients += " (its shard)";
  else if (memory::stage >= 2)
    gradients += " (the update keeps its shard of the mean: " + (known ? bytes(shard) : unknown) + ")";
  rows.emplace_back("gradients", gradients);
  std::string slot_text = memory::stage >= 1 && !known ? unknown + ", each" : bytes(shard) + " each";
  if (slots >= 0 && (known || memory::stage == 0))
    slot_text += " (" + std::to_string(slots) + " slots: " + bytes(static_cast<std::size_t>(slots) * shard) + ")";
  rows.emplace_back("optimizer slots", slot_text);
  if (memory::reduces_per_unit)
    rows.emplace_back("gathered", bytes(memory::gathered_bytes) + (memory::gathers ? " (one layer's weights and gradients)"
                                                                                  : " (one layer's gradients)"));
  rows.emplace_back("activations", Strategy::across_processes ? std::string("those of its batch")
                                                              : "those of its share of the batch, 1 / " +
                                                                    std::to_string(memory::replicas));
  return rows;
}

// The rows as summary() prints them, under a heading naming the strategy.
template <class Net, class Strategy, class Device = cpu>
std::string rank_memory_text(int slots, int workers = Strategy::replicas) {
  std::string text = "Per replica (" + Strategy::name() + ", ";
  if (!Strategy::across_processes)
    text += std::to_string(Strategy::replicas) + " replicas";
  else if (workers > 0)
    text += std::to_string(workers) + (workers == 1 ? " worker" : " workers");
  else
    text += "one per worker";
  text += "):\n";
  for (const auto& [what, value] : rank_memory_rows<Net, Strategy, Device>(slots, workers))
    text += "  " + what + ": " + value + "\n";
  return text;
}

}  // namespace distribute
}  // namespace typeflow

// zero<Stage, Strategy>: Strategy's data-parallel replicas, each keeping only
// its shard of the training state (ZeRO, Rajbhandari et al. 2020), so that a
// model's optimizer state need not fit on one device:
//
//   tf::model<mlp, tf::float32, tf::zero<1, tf::mirrored<2>>> model{42};
//
//   zero<1, S>   optimizer slots: replica r keeps and updates only shard r of
//                the slots; after the update the new weights of each shard are
//                copied to every replica (the all-gather);
//   zero<2, S>   and gradients: a reduce-scatter instead of the all-reduce,
//                so replica r sums only shard r of the gradients;
//   zero<3, S>   and parameters (gathered before each layer): not built yet.
//
// The trainable region [0, T) (model/memory_plan.hpp) is cut into N
// contiguous shards of region_shards<T, N>::shard_floats floats each, on
// 16-float (64-byte) boundaries; the last may be shorter, or empty when T is
// small. Replica r owns shard r. The sums keep mirrored<N>'s order (replica
// 0's gradient, then replica 1's, ..., element by element), so zero<k,
// mirrored<N>> trains to the same bits as mirrored<N> (global_clipnorm under
// zero<2> aside: docs/strategies.md gives its tolerance).
//
// It is a strategy (distribute/strategy.hpp) whose facts and collectives are
// Strategy's; its name, as checkpoints record it, is "zero<1, mirrored<2>>".
// What runs: zero<1|2, mirrored<N>> (N >= 2) on tf::cpu, in
// train/cpu_replicas.hpp. Every other combination is a compile error naming
// what is not built (zero_runs below); rank_memory.hpp gives each replica's
// bytes.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>

#include "typeflow/backend/device.hpp"
#include "typeflow/distribute/strategy.hpp"

namespace typeflow {

template <int Stage, class Strategy>
struct zero;

template <class S>
inline constexpr bool is_zero_v = false;
template <int Stage, class Strategy>
inline constexpr bool is_zero_v<zero<Stage, Strategy>> = true;

// 0 for a strategy that shards nothing.
template <class S>
inline constexpr int zero_stage_v = 0;
template <int Stage, class Strategy>
inline constexpr int zero_stage_v<zero<Stage, Strategy>> = Stage;

template <int Stage, class Strategy>
struct zero {
  static_assert(Stage >= 1 && Stage <= 3,
                "zero<Stage, Strategy>: Stage is 1 (optimizer slots sharded), 2 (and gradients) or 3 (and parameters)");
  static_assert(strategy<Strategy>,
                "zero<Stage, Strategy>: Strategy is the strategy whose replicas share the state: mirrored<N>, "
                "multi_worker or single_device (distribute/strategy.hpp)");
  static_assert(!is_zero_v<Strategy>, "zero<Stage, zero<...>>: shard once, e.g. zero<2, mirrored<4>>");

  using sharded_strategy = Strategy;
  static constexpr int stage = Stage;
  static constexpr int replicas = Strategy::replicas;
  static constexpr bool across_processes = Strategy::across_processes;
  static constexpr bool sync_statistics = Strategy::sync_statistics;
  // "zero<1, mirrored<2>>", as checkpoints record it.
  static std::string name() { return "zero<" + std::to_string(Stage) + ", " + Strategy::name() + ">"; }

  int rank() const { return inner.rank(); }
  bool is_chief() const { return inner.is_chief(); }
  void broadcast(float* data, std::size_t n) const { inner.broadcast(data, n); }
  void all_reduce_mean(float* data, std::size_t n) const { inner.all_reduce_mean(data, n); }

  [[no_unique_address]] Strategy inner{};
};

// The region [0, Floats) cut into Shards contiguous shards, each boundary on
// a 16-float line: shard s is [begin(s), end(s)), at most shard_floats long.
template <std::size_t Floats, int Shards>
struct region_shards {
  static_assert(Shards >= 1, "region_shards: at least one shard");
  static constexpr std::size_t line_floats = 16;  // 64 bytes
  static constexpr std::size_t shard_floats =
      ((Floats + Shards - 1) / Shards + line_floats - 1) / line_floats * line_floats;
  static constexpr std::size_t shard_bytes = shard_floats * sizeof(float);
  static constexpr std::size_t begin(int s) {
    const std::size_t at = static_cast<std::size_t>(s) * shard_floats;
    return at < Floats ? at : Floats;
  }
  static constexpr std::size_t end(int s) { return begin(s + 1); }
  static constexpr std::size_t size(int s) { return end(s) - begin(s); }
};

namespace distribute {

// What of zero<> is built: one static_assert per missing part, each naming
// it. model<> checks it for its strategy and device; true for any strategy
// that is not a zero<>.
template <class Strategy, class Device>
constexpr bool zero_runs() {
  if constexpr (is_zero_v<Strategy>) {
    static_assert(Strategy::stage != 3,
                  "zero<3, Strategy>: stage 3 (parameters sharded, gathered before each layer) is not built yet; "
                  "zero<1, Strategy> (optimizer slots) and zero<2, Strategy> (and gradients) are");
    static_assert(!Strategy::across_processes,
                  "zero<Stage, multi_worker>: sharding across processes is not built yet; "
                  "zero<1|2, mirrored<N>> (replicas in one process) is");
    static_assert(Strategy::replicas >= 2,
                  "zero<Stage, Strategy>: one replica has nothing to share its state with; use Strategy itself "
                  "(single_device, mirrored<1>), or zero<Stage, mirrored<N>> with N >= 2");
    static_assert(std::is_same_v<Device, cpu>,
                  "zero<Stage, Strategy> on tf::cuda is not built yet; zero<1|2, mirrored<N>> runs on tf::cpu");
  }
  return true;
}

}  // namespace distribute
}  // namespace typeflow

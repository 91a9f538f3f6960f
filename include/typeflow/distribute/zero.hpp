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
//   zero<3, S>   and parameters: replica r keeps only shard r of the weights;
//                each top-level layer's are gathered from their owners
//                just before its forward and its backward, and freed after
//                (train/cpu_replicas.hpp, train/cpu_worker_shards.hpp).
//
// The trainable region [0, T) (model/memory_plan.hpp) is cut into N
// contiguous shards of region_shards<T, N>::shard_floats floats each, on
// 16-float (64-byte) boundaries; the last may be shorter, or empty when T is
// small. Replica r owns shard r. The sums keep mirrored<N>'s order (replica
// 0's gradient, then replica 1's, ..., element by element), so zero<k,
// mirrored<N>> trains to the same bits as mirrored<N> (global_clipnorm under
// zero<2> aside: docs/strategies.md gives its tolerance).
//
// Over multi_worker the shards are the workers' (one replica per process),
// cut at run time into as many shards as the job has workers
// (shard_bounds); the collectives are MPI's reduce-scatter and all-gather,
// whose sums, for two workers, are the all-reduce's bits.
//
// It is a strategy (distribute/strategy.hpp) whose facts and collectives are
// Strategy's; its name, as checkpoints record it, is "zero<1, mirrored<2>>".
// What runs: zero<1|2|3, mirrored<N>> (N >= 2) on tf::cpu, in
// train/cpu_replicas.hpp, zero<1|2|3, multi_worker> on tf::cpu, in
// train/cpu_worker_shards.hpp, and zero<1|2, mirrored<N> | multi_worker> on
// tf::cuda (NCCL; distribute/cuda_replicas.hpp). Every other combination is
// a compile error naming what is not built (zero_runs below);
// rank_memory.hpp gives each replica's bytes.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

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

// The length of each of `shards` contiguous shards of `floats` floats:
// ceil(floats / shards) rounded up to a 16-float (64-byte) line.
constexpr std::size_t shard_length(std::size_t floats, int shards) {
  constexpr std::size_t line_floats = 16;
  const std::size_t count = static_cast<std::size_t>(shards);
  return ((floats + count - 1) / count + line_floats - 1) / line_floats * line_floats;
}

// The region [0, Floats) cut into Shards contiguous shards, each boundary on
// a 16-float line: shard s is [begin(s), end(s)), at most shard_floats long.
template <std::size_t Floats, int Shards>
struct region_shards {
  static_assert(Shards >= 1, "region_shards: at least one shard");
  static constexpr std::size_t shard_floats = shard_length(Floats, Shards);
  static constexpr std::size_t shard_bytes = shard_floats * sizeof(float);
  static constexpr std::size_t begin(int s) {
    const std::size_t at = static_cast<std::size_t>(s) * shard_floats;
    return at < Floats ? at : Floats;
  }
  static constexpr std::size_t end(int s) { return begin(s + 1); }
  static constexpr std::size_t size(int s) { return end(s) - begin(s); }
};

// The same cut when the shard count is known at run time (multi_worker's
// workers): shards + 1 bounds, shard s is [bounds[s], bounds[s + 1]).
inline std::vector<std::size_t> shard_bounds(std::size_t floats, int shards) {
  const std::size_t length = shard_length(floats, shards);
  std::vector<std::size_t> bounds(static_cast<std::size_t>(shards) + 1);
  for (std::size_t s = 0; s < bounds.size(); ++s) bounds[s] = std::min(s * length, floats);
  return bounds;
}

namespace distribute {

// What a strategy across processes offers zero<k> (multi_worker does): the
// job's size, and the shards' collectives (each a mean, a copy or a sum over
// the processes; `bounds` cuts a region into one shard per process).
template <class S>
concept shard_collectives = requires(const S& s, float* values, double* sums, std::span<const std::size_t> bounds,
                                     const char* operation) {
  { s.size() } -> std::convertible_to<int>;
  s.reduce_scatter_mean(values, bounds, operation);
  s.all_gather(values, bounds, operation);
  s.all_reduce_sum(sums, std::size_t{1}, operation);
};

// Runs `work` here and learns whether it succeeded on every worker: its
// exception is thrown again where it was thrown, and the workers where it
// succeeded throw one naming the step, so that none goes on to a
// collective that another left (a sharded checkpoint's save and load).
template <shard_collectives Workers, class Work>
void all_or_none(const Workers& workers, const std::string& step, Work&& work) {
  std::exception_ptr failed;
  try {
    work();
  } catch (...) {
    failed = std::current_exception();
  }
  double refused = failed ? 1 : 0;
  workers.all_reduce_sum(&refused, 1, "a sharded checkpoint's verdict");
  if (refused == 0) return;
  if (failed) std::rethrow_exception(failed);
  throw std::runtime_error(step + ": another worker failed (its error is in its output); worker " +
                           std::to_string(workers.rank()) + " stopped too, changing nothing");
}

// What of zero<> is built: one static_assert per missing part, each naming
// it. model<> checks it for its strategy and device; true for any strategy
// that is not a zero<>.
template <class Strategy, class Device>
constexpr bool zero_runs() {
  if constexpr (is_zero_v<Strategy>) {
    if constexpr (Strategy::across_processes)
      static_assert(shard_collectives<typename Strategy::sharded_strategy>,
                    "zero<Stage, Strategy> across processes: Strategy must give the shards' collectives, as "
                    "multi_worker does: size(), reduce_scatter_mean(), all_gather(), all_reduce_sum() "
                    "(distribute/zero.hpp)");
    static_assert(Strategy::replicas >= 2 || Strategy::across_processes,
                  "zero<Stage, Strategy>: one replica has nothing to share its state with; use Strategy itself "
                  "(single_device, mirrored<1>), or zero<Stage, mirrored<N>> with N >= 2");
    static_assert(std::is_same_v<Device, cpu> || Strategy::stage <= 2,
                  "zero<3, Strategy> on tf::cuda is not built yet (each layer's weights gathered before its forward "
                  "and backward): zero<1|2, mirrored<N> | multi_worker> run on tf::cuda, zero<1|2|3, ...> on "
                  "tf::cpu");
  }
  return true;
}

}  // namespace distribute
}  // namespace typeflow

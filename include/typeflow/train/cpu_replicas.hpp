// mirrored<N> on the CPU: the replication algorithm (distribute/mirrored.hpp
// describes the strategy; this is its CPU half), a part of the CPU engine
// (train/cpu_engine.hpp): the replicas are step programs of their own.
//
// The engine's own arena is replica 0; replicas 1 .. N-1 live here, each with
// its own arena (weights and gradients, no optimizer slots, and its own
// activations), run state and oneDNN context, and the threads that run them
// (replica_pool, the cores divided among the replicas). One step:
//   programs_for()  each replica's program, with replica 0's weights if they changed from outside;
//   each(job)       a job on every replica at once (a step's forward, loss
//                   and backward: train/training_step.hpp);
//   reduce_gradients()  then the mean of the gradients into replica 0's,
//                   summed in replica order element by element (no
//                   dependence on thread timing);
//   after_update()  the updated weights from replica 0 to the others (and
//                   the mean of batch_norm's statistics under
//                   sync_batch_norm_statistics; in a last partial batch
//                   weighed by each replica's valid samples, weigh_statistics).
//
// zero<k, mirrored<N>> (distribute/zero.hpp) cuts the trainable region into N
// shards; replica r owns shard r and keeps only its optimizer slots, after
// its gradients, in its own arena (replica 0's in the engine's):
//   reduce_gradients()  under zero<1> the mean goes to replica 0's as above;
//                   under zero<2> each replica sums its own shard of every
//                   replica's gradients (the same order, so the same bits)
//                   into its gradient region, unit by unit as backward
//                   goes (backward_sharded() below), and frees the rest;
//   sharded_update()  each replica's arguments for its shard (weights, the
//                   mean gradient, its slot shards), which the optimizer
//                   updates on every replica at once
//                   (optimizers/sharded_update.hpp);
//   after_update()  the all-gather: each replica copies the other shards'
//                   updated weights from their owners.
// all_updatable(), unscale_all_finite() and apply_regularizers() are the
// engine's per-gradient steps over zero<2>'s shards, one verdict for all.
//
// zero<3, mirrored<N>> also shards the weights: replica r keeps only shard r
// of the trainable parameters between steps (and of the gradients); the
// other pages of its parameter and gradient regions hold no memory of their
// own: those of the units' weights and gradients are mapped onto one window
// that every unit shares (train/gather_window.hpp), the rest given back to
// the system (arena::release). Each top-level layer
// (distribute/layer_groups.hpp), or each child of a top-level combinator
// (repeat<12, block>: each block; through contract/layer.hpp's
// parameter_hooks), is a unit that runs as:
//   forward_sharded()   gather the unit's weights (and a tied matrix) from
//                   their owners, its forward, then free them;
//   backward_sharded()  gather them again, the unit's backward, then (every
//                   replica's backward of it done: a barrier) replica r sums
//                   shard r's part of the unit's gradients over the
//                   replicas in replica order, as zero<2> does, and (after a
//                   second barrier) frees the rest of them and the weights.
// The update then reads only the owners' shards, and no all-gather follows:
// the next step gathers. batch_norm's moving statistics are never freed nor
// gathered (each replica's own, as under mirrored<N>). Replica 0's weights
// are gathered whole where something reads them outside a step (make_whole:
// parameters(), save_weights, checkpoints, generate), and freed again when
// the next step begins.
#pragma once

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include <omp.h>

#include "typeflow/backend/cpu/context.hpp"
#include "typeflow/core/parallel.hpp"
#include "typeflow/core/random.hpp"
#include "typeflow/distribute/layer_groups.hpp"
#include "typeflow/distribute/mirrored.hpp"
#include "typeflow/distribute/replica_seeds.hpp"
#include "typeflow/distribute/zero.hpp"
#include "typeflow/model/memory_plan.hpp"
#include "typeflow/optimizers/sharded_update.hpp"
#include "typeflow/precision/loss_scale.hpp"
#include "typeflow/train/arena.hpp"
#include "typeflow/train/gather_window.hpp"
#include "typeflow/train/shard_units.hpp"
#include "typeflow/train/non_finite.hpp"
#include "typeflow/train/parameter_table.hpp"
#include "typeflow/train/program_slot.hpp"
#include "typeflow/train/regularization.hpp"
#include "typeflow/train/step_program.hpp"

namespace typeflow {

// zero<3>'s meeting point between the replicas' threads, once per layer of
// backward. abort() (a replica failed) makes every wait, present and to
// come, throw instead of waiting for a replica that will not arrive.
class replica_barrier {
 public:
  explicit replica_barrier(int count) : count_(count) {}
  void arrive_and_wait() {
    std::unique_lock lock(mutex_);
    if (aborted_) throw aborted();
    const std::uint64_t generation = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      lock.unlock();
      wake_.notify_all();
      return;
    }
    wake_.wait(lock, [&] { return generation_ != generation || aborted_; });
    if (generation_ == generation) throw aborted();
  }
  void abort() {
    {
      std::lock_guard lock(mutex_);
      aborted_ = true;
    }
    wake_.notify_all();
  }
  // Before a backward: no replica waits now.
  void reset() {
    std::lock_guard lock(mutex_);
    aborted_ = false;
    arrived_ = 0;
  }

 private:
  static std::runtime_error aborted() {
    return std::runtime_error("zero<3>: another replica failed during backward; this one stops with it");
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  int count_, arrived_ = 0;
  std::uint64_t generation_ = 0;
  bool aborted_ = false;
};

template <class Net, class Strategy>
class cpu_replicas {
  using plan0 = memory_plan<Net, 0, 0>;

 public:
  static constexpr int count = Strategy::replicas;
  static constexpr int stage = zero_stage_v<Strategy>;  // 0: nothing sharded (mirrored<N>)
  using shards = region_shards<Net::trainable_floats, count>;
  // The bytes of one optimizer slot in a replica's arena: the whole trainable
  // region on replica 0, or under zero<k> one shard on every replica.
  static constexpr std::size_t slot_stride = stage > 0 ? shards::shard_bytes : plan0::trainable_bytes;
  // zero<2|3>: each unit's gradients reduced as its backward ends, and the
  // rest of them freed; zero<3>: the weights sharded too, gathered unit by unit.
  static constexpr bool reduces_per_unit = stage >= 2 && count > 1;
  static constexpr bool gathers = reduces_per_unit && stage >= 3;  // within one process (across: cpu_worker_shards)
  using groups = layer_groups<Net>;

  explicit cpu_replicas(std::uint64_t seed) {
    if constexpr (count > 1) {
      for (int r = 1; r < count; ++r) {
        auto replica = std::make_unique<secondary>();
        replica->memory.reserve(plan0::slots_offset, 0);
        secondaries_.push_back(std::move(replica));
      }
      restore_runs(seed, 0);
      pool_ = std::make_unique<replica_pool>(count, std::max(1, omp_get_max_threads() / count));
    }
    if constexpr (stage > 0) {
      std::ptrdiff_t bounds[count + 1];
      for (int r = 0; r <= count; ++r) bounds[r] = static_cast<std::ptrdiff_t>(shards::begin(r));
      shard_table_ = optimizers::cut_region(parameter_table<Net>::tensors(), bounds);
    }
    if constexpr (reduces_per_unit) {
      statistics_ = trainable_statistics<Net>();
      for (int r = 0; r < count; ++r) {
        hook_owners_[static_cast<std::size_t>(r)] = {this, r, nullptr};
        hooks_[static_cast<std::size_t>(r)] = {&hook_owners_[static_cast<std::size_t>(r)], &hook_before,
                                               &hook_after_forward, &hook_after_backward};
        if (r > 0) secondaries_[static_cast<std::size_t>(r - 1)]->run.hooks = &hooks_[static_cast<std::size_t>(r)];
      }
    }
  }

  // zero<k>, after compile(): each secondary's `slots` slot shards, zeroed,
  // between its gradients and its step region (whose programs start again).
  void compiled(int slots) {
    static_assert(stage > 0, "cpu_replicas::compiled: only zero<k> keeps slots on replicas 1 .. N-1");
    slots_ = slots;
    step_base_ = plan0::slots_offset + static_cast<std::size_t>(slots) * slot_stride;
    peak_.fill(0);
    for (auto& replica : secondaries_) {
      replica->program.reset();
      replica->memory.reserve(step_base_, plan0::slots_offset);
      std::memset(replica->memory.data() + plan0::slots_offset, 0, step_base_ - plan0::slots_offset);
    }
    slot_pointers_.assign(static_cast<std::size_t>(count * slots), nullptr);
  }

  // Each replica's dropout stream: its own seed drawn from the model's, and
  // the step counter (load_checkpoint continues it).
  void restore_runs(std::uint64_t seed, std::uint64_t step) {
    for (std::size_t r = 1; r <= secondaries_.size(); ++r) {
      secondaries_[r - 1]->run.seed = distribute::replica_seed(seed, static_cast<int>(r));
      secondaries_[r - 1]->run.step = step;
    }
  }

  // Replica 0's weights changed outside a training step (initialisation,
  // load_weights, parameter()): the others take them before the next step.
  void mark_stale() { stale_ = true; }

  // zero<3>: whether replica 0 holds every trainable weight as it is now
  // (gathered whole, or changed from outside since the last step).
  bool primary_holds_all() const { return whole_ || stale_; }

  // Replica r's parameter region (r >= 1).
  std::span<const float> parameter_region(int r) const {
    return {secondaries_.at(static_cast<std::size_t>(r - 1))->memory.template at<float>(0), Net::parameter_floats};
  }

  // A step's programs for the shard size: programs[0] is the engine's
  // (set up first: that may move its arena, `primary`); replica r's
  // programs[r], with replica 0's weights if they changed from outside.
  template <class Program>
  void programs_for(arena& primary, Program* (&programs)[count]) {
    synchronize(primary);
    for (int r = 1; r < count; ++r) programs[r] = &program_of<Program::batch_size>(*secondaries_[r - 1]);
  }
  // Replica r's dropout stream (r >= 1; replica 0's is the engine's).
  run_state& run_of(int r) { return secondaries_.at(static_cast<std::size_t>(r - 1))->run; }
  std::size_t arena_bytes(int r) const { return secondaries_.at(static_cast<std::size_t>(r - 1))->memory.size(); }

  // f(r) on every replica's thread at once.
  template <class F>
  void each(F& f) {
    runner()(f);
  }

  // After every replica's backward: the mean of the gradients into replica
  // 0's, or under zero<2> each replica's shard of it into its own.
  void reduce_gradients(std::byte* primary) {
    if constexpr (stage >= 2)
      reduce_scatter_gradients(primary);
    else
      all_reduce_gradients(reinterpret_cast<float*>(primary + plan0::gradients_offset));
  }

  // After an optimizer update: the trainable weights from replica 0 to the
  // others, or under zero<k> each shard's from its owner to the others (the
  // all-gather); each replica keeps its own statistics, or with
  // sync_batch_norm_statistics all take the replicas' mean.
  void after_update(float* primary) {
    if constexpr (gathers) {
      // nothing: the next step gathers from the shards' owners
    } else if constexpr (stage > 0) {
      all_gather_weights(primary);
    } else {
      for (const auto& t : parameter_table<Net>::tensors()) {
        if (t.kind == param_kind::statistic) continue;
        for (auto& replica : secondaries_)
          std::memcpy(replica->memory.template at<float>(0) + t.offset, primary + t.offset, t.size * sizeof(float));
      }
    }
    if constexpr (Strategy::sync_statistics) {
      for (const auto& t : parameter_table<Net>::tensors()) {
        if (t.kind != param_kind::statistic) continue;
        for (std::size_t i = 0; i < t.size; ++i) {
          if (statistics_weighed_) {
            float total = statistics_weights_[0] * primary[t.offset + i];
            for (int r = 1; r < count; ++r)
              total += statistics_weights_[static_cast<std::size_t>(r)] *
                       secondaries_[static_cast<std::size_t>(r - 1)]->memory.template at<float>(0)[t.offset + i];
            primary[t.offset + i] = total;
            continue;
          }
          float total = primary[t.offset + i];
          for (auto& replica : secondaries_) total += replica->memory.template at<float>(0)[t.offset + i];
          primary[t.offset + i] = total / count;
        }
        for (auto& replica : secondaries_)
          std::memcpy(replica->memory.template at<float>(0) + t.offset, primary + t.offset, t.size * sizeof(float));
      }
    }
  }

  // sync_batch_norm_statistics in a last partial batch: after_update weighs
  // replica r's moving statistics by weights[r], its share of the valid
  // samples, instead of taking their plain mean. A moving average is linear
  // in the batch statistics, so the result moves by the valid samples'
  // weighted statistics, and a replica without samples (whose statistics did
  // not move) counts for nothing. `weights` empty: a full batch.
  void weigh_statistics(std::span<const float> weights) {
    statistics_weighed_ = !weights.empty();
    for (std::size_t r = 0; r < weights.size() && r < statistics_weights_.size(); ++r)
      statistics_weights_[r] = weights[r];
  }

  // zero<k>: the update's arguments, shard r's on replica r: its weights,
  // the mean gradient (replica 0's under zero<1>, its own under zero<2>) and
  // its slot shards. `primary` is the engine's arena (replica 0's).
  optimizers::sharded_update sharded_update(std::byte* primary, std::int64_t iteration) {
    static_assert(stage > 0, "cpu_replicas::sharded_update: only under zero<k>");
    for (int r = 0; r < count; ++r) {
      const std::size_t begin = shards::begin(r);
      float** slots = slot_pointers_.data() + static_cast<std::size_t>(r * slots_);
      for (int s = 0; s < slots_; ++s) slots[s] = slot_shard(r, s, primary);
      optimizers::update_arguments& a = shard_arguments_[r];
      a = {};
      a.weights = weights_of(r, primary) + begin;
      a.grads = gradients_of(stage >= 2 ? r : 0, primary) + begin;
      a.slots = slots;
      a.floats = static_cast<std::ptrdiff_t>(shards::size(r));
      a.tensors = shard_table_[static_cast<std::size_t>(r)].pieces;
      a.iteration = iteration;
    }
    return {parameter_table<Net>::tensors(), shard_table_, shard_arguments_,
            stage >= 2 ? nullptr : gradients_of(0, primary), runner()};
  }

  // zero<2>'s steps over the mean gradient, each replica over its shard, one
  // verdict for all: whether every value may reach an update (the NaN
  // policy); the loss scale's unscaling, and whether all were finite; the
  // regularizers' gradients added to the shards (returns the penalty: the
  // sum of each tensor's pieces' penalties, so a tensor a boundary cuts may
  // differ from apply_regularizers' sum in its last bits).
  bool all_updatable(std::byte* primary) {
    int bad[count] = {};
    auto check = [&](int r) {
      bad[r] = !all_updatable_parallel(gradients_of(r, primary) + shards::begin(r), shards::size(r));
    };
    each(check);
    return std::none_of(bad, bad + count, [](int b) { return b != 0; });
  }
  bool unscale_all_finite(std::byte* primary, float scale) {
    int bad[count] = {};
    auto unscale = [&](int r) {
      bad[r] = !precision::unscale_all_finite(gradients_of(r, primary) + shards::begin(r), shards::size(r), scale);
    };
    each(unscale);
    return std::none_of(bad, bad + count, [](int b) { return b != 0; });
  }
  double apply_regularizers_to_shards(std::byte* primary) { return regularize_shards(primary, true); }
  // zero<3>: the regularizers' penalty alone (evaluate, a skipped step), from
  // the owners' weights: replica 0's are freed outside its shard.
  double regularization_penalty(std::byte* primary) { return regularize_shards(primary, false); }

  // zero<k>: the whole mean gradient (zero<2>: each shard from its owner)
  // and optimizer slot s, gathered into `into` (trainable floats), and slot s
  // scattered from `from` to the shards' owners.
  void gather_gradients(const std::byte* primary, float* into) const {
    for (int r = 0; r < count; ++r) {
      const int holder = stage >= 2 ? r : 0;
      const std::byte* arena = holder == 0 ? primary : secondaries_[static_cast<std::size_t>(holder - 1)]->memory.data();
      std::memcpy(into + shards::begin(r), reinterpret_cast<const float*>(arena + plan0::gradients_offset) + shards::begin(r),
                  shards::size(r) * sizeof(float));
    }
  }
  void gather_slot(int s, std::byte* primary, float* into) {
    for (int r = 0; r < count; ++r)
      std::memcpy(into + shards::begin(r), slot_shard(r, s, primary), shards::size(r) * sizeof(float));
  }
  void scatter_slot(int s, std::byte* primary, const float* from) {
    for (int r = 0; r < count; ++r)
      std::memcpy(slot_shard(r, s, primary), from + shards::begin(r), shards::size(r) * sizeof(float));
  }
  // zero<k>'s checkpoint shards: the cut (count + 1 bounds), the shards
  // this process holds (every replica's) and shard r's part of slot s.
  static std::vector<std::size_t> shard_cut() { return shard_bounds(Net::trainable_floats, count); }
  static std::vector<int> held_shards() {
    std::vector<int> held(count);
    for (int r = 0; r < count; ++r) held[static_cast<std::size_t>(r)] = r;
    return held;
  }
  std::span<float> slot_shard_floats(int r, int s, std::byte* primary) {
    return {slot_shard(r, s, primary), shards::size(r)};
  }

  // zero<3>: replica r's forward, each unit's weights gathered from their
  // owners just before it and freed after (replica 0's alone: evaluate, predict).
  template <class Program>
  void forward_sharded(int r, Program& program, arena& primary) {
    static_assert(gathers, "cpu_replicas::forward_sharded: only under zero<3>");
    hook_owners_[static_cast<std::size_t>(r)].primary = &primary;
    windows_[static_cast<std::size_t>(r)].map(arena_of(r, primary));  // the units seen so far (nothing is gathered now)
    for (std::size_t i = 0; i < groups::count; ++i) {
      if (groups::per_child[i]) {  // the combinator's hooks gather child by child
        program.forward_layer(i);
        continue;
      }
      gather_layer(r, i, primary);
      program.forward_layer(i);
      free_layer_weights(r, i, primary);
    }
    if (r == 0) whole_ = false;
  }
  // zero<2|3>: replica r's backward, unit by unit: (zero<3>: the weights
  // gathered,) the unit's backward, then shard r's part of its mean gradient
  // (after every replica's backward of it), then the rest of its gradients
  // (and its weights) freed. Every replica runs it at once (each());
  // begin_backward() first.
  template <class Program>
  void backward_sharded(int r, Program& program, arena& primary) {
    static_assert(reduces_per_unit, "cpu_replicas::backward_sharded: only under zero<2|3>");
    hook_owners_[static_cast<std::size_t>(r)].primary = &primary;
    hook_owners_[static_cast<std::size_t>(r)].backward = true;
    if constexpr (!gathers) windows_[static_cast<std::size_t>(r)].map(arena_of(r, primary));  // zero<2>: no gradient is held now
    try {
      for (std::size_t k = groups::count; k-- > 0;) {
        if (groups::per_child[k]) {
          program.backward_layer(k);
          continue;
        }
        if constexpr (gathers)
          gather_layer(r, k, primary);
        else
          windows_[static_cast<std::size_t>(r)].begin_unit();
        if (!groups::is_tied_source[k]) open_gradients(r, groups::own[k].begin, groups::own[k].end, primary);
        program.backward_layer(k);
        const auto& layer = groups::own[k];
        reduce_unit(r, layer.begin, layer.end, primary);
        if constexpr (gathers) free_layer_weights(r, k, primary);
      }
    } catch (...) {
      hook_owners_[static_cast<std::size_t>(r)].backward = false;
      barrier_.abort();
      throw;
    }
    hook_owners_[static_cast<std::size_t>(r)].backward = false;
    if (r == 0) whole_ = false;
  }
  void begin_backward() { barrier_.reset(); }
  // zero<3>: before replica 0 runs alone (evaluate, predict), the shards at
  // their owners, as a step begins.
  void begin_inference(arena& primary) { synchronize(primary); }
  // zero<2|3>: the engine's run_state takes replica 0's hooks.
  const parameter_hooks* hooks_of_primary() const { return &hooks_[0]; }

  // zero<3>: replica 0's trainable weights gathered whole (for whatever reads
  // them outside a step); the next step frees them again.
  void make_whole(arena& primary) {
    if constexpr (gathers) {
      if (whole_) return;
      primary.unalias();  // the whole region private again; the next step's units map the window anew
      gather(0, 0, Net::trainable_floats, primary, std::nullopt);
      whole_ = true;
    }
  }

  // The bytes of replica r's weights, gradients and slots held in memory now
  // (whole pages), and the most seen during a step since track_peaks(true)
  // (zero<3> looks after each gather: a layer's weights, and in backward its
  // gradients, beside the shards).
  std::size_t resident_state_bytes(int r, const arena& primary) const {
    return arena_of(r, primary).resident_bytes(0, step_base_) + window_bytes(r);
  }
  std::size_t peak_state_bytes(int r) const { return peak_.at(static_cast<std::size_t>(r)); }
  void track_peaks(bool on) {
    tracking_ = on;
    peak_.fill(0);
  }

 private:
  struct secondary {
    arena memory;
    backend::cpu::context context;
    run_state run;
    program_slot program;
  };

  // Replica r's parameter region, gradient region and slot s's shard
  // (replica 0's in the engine's arena, `primary`).
  float* weights_of(int r, std::byte* primary) {
    return r == 0 ? reinterpret_cast<float*>(primary)
                  : secondaries_[static_cast<std::size_t>(r - 1)]->memory.template at<float>(0);
  }
  float* gradients_of(int r, std::byte* primary) {
    std::byte* arena = r == 0 ? primary : secondaries_[static_cast<std::size_t>(r - 1)]->memory.data();
    return reinterpret_cast<float*>(arena + plan0::gradients_offset);
  }
  float* slot_shard(int r, int s, std::byte* primary) {
    std::byte* arena = r == 0 ? primary : secondaries_[static_cast<std::size_t>(r - 1)]->memory.data();
    return reinterpret_cast<float*>(arena + plan0::slots_offset + static_cast<std::size_t>(s) * slot_stride);
  }

  arena& arena_of(int r, arena& primary) {
    return r == 0 ? primary : secondaries_[static_cast<std::size_t>(r - 1)]->memory;
  }
  const arena& arena_of(int r, const arena& primary) const {
    return r == 0 ? primary : secondaries_[static_cast<std::size_t>(r - 1)]->memory;
  }

  // Each shard's part of every regularized tensor, from its owner's weights
  // (zero<3>'s only ones), with its gradient added to the owner's shard when
  // add_gradients: the penalty summed by pieces (a tensor a boundary cuts may
  // differ from apply_regularizers' sum in its last bits).
  double regularize_shards(std::byte* primary, bool add_gradients) {
    double total = 0;
    for_each_regularized<Net>([&]<class Regularizer>(std::size_t offset, std::size_t floats) {
      const std::size_t first = offset / sizeof(float), last = first + floats;
      for (int r = 0; r < count; ++r) {
        const std::size_t begin = std::max(first, shards::begin(r)), end = std::min(last, shards::end(r));
        if (begin >= end) continue;
        const float* weights = weights_of(r, primary) + begin;
        total += add_gradients ? Regularizer::apply(weights, gradients_of(r, primary) + begin, end - begin)
                               : Regularizer::penalty(weights, end - begin);
      }
    });
    return total;
  }

  // zero<3>'s units (train/shard_units.hpp) over shard r.
  template <class F>
  void without_statistics(std::size_t from, std::size_t to, F&& f) const {
    typeflow::without_statistics(statistics_, from, to, std::forward<F>(f));
  }
  template <class F>
  static void outside_shard(int r, std::size_t from, std::size_t to, F&& f) {
    outside_own(shards::begin(r), shards::end(r), from, to, std::forward<F>(f));
  }
  // Replica r's copy of [from, to)'s weights from their owners (statistics
  // are each replica's own), noted as `part` of the current unit in its
  // window (make_whole's whole region: not noted).
  void gather(int r, std::size_t from, std::size_t to, arena& primary,
              std::optional<gather_window::part> part = gather_window::weights) {
    float* into = weights_of(r, primary.data());
    if (part)
      outside_shard(r, from, to, [&](std::size_t a, std::size_t b) {
        without_statistics(a, b, [&](std::size_t at, std::size_t n) {
          windows_[static_cast<std::size_t>(r)].note(*part, at * sizeof(float), n * sizeof(float));
        });
      });
    for (int s = 0; s < count; ++s) {
      const std::size_t a = std::max(from, shards::begin(s)), b = std::min(to, shards::end(s));
      if (s == r || a >= b) continue;
      const float* owner = weights_of(s, primary.data());
      without_statistics(a, b, [&](std::size_t at, std::size_t n) {
        std::memcpy(into + at, owner + at, n * sizeof(float));
      });
    }
    note_peak(r, arena_of(r, primary));
  }
  void free_weights(int r, std::size_t from, std::size_t to, arena& primary) {
    arena& memory = arena_of(r, primary);
    outside_shard(r, from, to, [&](std::size_t a, std::size_t b) {
      without_statistics(a, b, [&](std::size_t at, std::size_t n) {
        memory.release(at * sizeof(float), n * sizeof(float));
      });
    });
  }
  // After every replica's backward of the unit [from, to): shard r's part of
  // its mean gradient into replica r's, summed in replica order element by
  // element as reduce_scatter_gradients sums; then the rest freed.
  void reduce_unit(int r, std::size_t from, std::size_t to, arena& primary) {
    if (from >= to) return;
    note_peak(r, arena_of(r, primary));
    barrier_.arrive_and_wait();  // every replica's gradient of the unit is written
    mean_into(r, std::max(from, shards::begin(r)), std::min(to, shards::end(r)), primary.data());
    barrier_.arrive_and_wait();  // and read
    arena& memory = arena_of(r, primary);
    outside_shard(r, from, to, [&](std::size_t x, std::size_t y) {
      memory.release(plan0::gradients_offset + x * sizeof(float), (y - x) * sizeof(float));
    });
  }
  // Before a unit's backward: its gradients outside shard r noted in the
  // window, and zeroed where the window holds them (freed pages read as zero).
  void open_gradients(int r, std::size_t from, std::size_t to, arena& primary) {
    outside_shard(r, from, to, [&](std::size_t a, std::size_t b) {
      typeflow::open_gradients(windows_[static_cast<std::size_t>(r)], arena_of(r, primary), plan0::gradients_offset, a, b);
    });
  }
  std::size_t window_bytes(int r) const {
    if constexpr (reduces_per_unit)
      return windows_[static_cast<std::size_t>(r)].resident_bytes();
    else
      return 0;
  }
  // A top-level layer that is not a combinator: its weights and a tied matrix.
  void gather_layer(int r, std::size_t i, arena& primary) {
    windows_[static_cast<std::size_t>(r)].begin_unit();
    for_each_layer_range<groups>(i, [&](std::size_t from, std::size_t to, gather_window::part part) {
      gather(r, from, to, primary, part);
    });
  }
  void free_layer_weights(int r, std::size_t i, arena& primary) {
    for_each_layer_range<groups>(i, [&](std::size_t from, std::size_t to, auto) { free_weights(r, from, to, primary); });
  }
  void note_peak(int r, const arena& memory) {
    if (!tracking_) return;
    auto& peak = peak_[static_cast<std::size_t>(r)];
    peak = std::max(peak, memory.resident_bytes(0, step_base_) + window_bytes(r));
  }

  // The combinators' hooks (parameter_hooks): replica r's, over its arena.
  struct hook_owner {
    cpu_replicas* self = nullptr;
    int r = 0;
    arena* primary = nullptr;  // set as a step (or replica 0's inference) begins
    bool backward = false;     // in backward_sharded: the unit's gradients are opened too
    std::pair<std::size_t, std::size_t> unit(const float* params, std::size_t floats) const {
      const std::size_t at = static_cast<std::size_t>(params - self->weights_of(r, primary->data()));
      return {at, at + floats};
    }
  };
  // (zero<2> holds the weights whole: its hooks only reduce, in backward.
  // Its forward, evaluate's and predict's too, calls these with no arena set.)
  static void hook_before(void* owner, const float* params, std::size_t floats) {
    auto& h = *static_cast<hook_owner*>(owner);
    if (!gathers && !h.backward) return;
    const auto [from, to] = h.unit(params, floats);
    h.self->windows_[static_cast<std::size_t>(h.r)].begin_unit();
    if constexpr (gathers) h.self->gather(h.r, from, to, *h.primary);
    if (h.backward) h.self->open_gradients(h.r, from, to, *h.primary);
  }
  static void hook_after_forward(void* owner, const float* params, std::size_t floats) {
    if constexpr (gathers) {
      auto& h = *static_cast<hook_owner*>(owner);
      const auto [from, to] = h.unit(params, floats);
      h.self->free_weights(h.r, from, to, *h.primary);
    }
  }
  static void hook_after_backward(void* owner, const float* params, std::size_t floats) {
    auto& h = *static_cast<hook_owner*>(owner);
    const auto [from, to] = h.unit(params, floats);
    h.self->reduce_unit(h.r, from, to, *h.primary);
    if constexpr (gathers) h.self->free_weights(h.r, from, to, *h.primary);
  }

  optimizers::shard_runner runner() {
    return {[](void* pool, optimizers::shard_runner::job job, void* context) {
              static_cast<replica_pool*>(pool)->run(job, context);
            },
            pool_.get()};
  }

  // zero<2>: shard r's mean into replica r's gradients, summed in replica
  // order element by element as all_reduce_gradients sums.
  void reduce_scatter_gradients(std::byte* primary) {
    auto reduce = [&](int r) { mean_into(r, shards::begin(r), shards::end(r), primary); };
    each(reduce);
  }
  // [from, to) of the replicas' mean gradient into replica r's, summed in
  // replica order element by element (mirrored<N>'s order, so its bits).
  void mean_into(int r, std::size_t from, std::size_t to, std::byte* primary) {
    if (from >= to) return;
    const float* sources[count];
    for (int q = 0; q < count; ++q) sources[q] = gradients_of(q, primary);
    float* const into = gradients_of(r, primary);
    constexpr float mean = 1.f / count;
    typeflow::parallel_for(static_cast<std::ptrdiff_t>(to - from), [&, from](std::ptrdiff_t k) {
      const std::size_t i = from + static_cast<std::size_t>(k);
      float total = sources[0][i];
      for (int q = 1; q < count; ++q) total += sources[q][i];
      into[i] = total * mean;
    });
  }

  // zero<k>: each replica copies the other shards' trainable tensors
  // (statistics stay each replica's) from their owners.
  void all_gather_weights(float* primary) {
    std::byte* arena = reinterpret_cast<std::byte*>(primary);
    auto gather = [&](int r) {
      float* own = weights_of(r, arena);
      for (int s = 0; s < count; ++s) {
        if (s == r) continue;
        const float* owner = weights_of(s, arena);
        const std::size_t begin = shards::begin(s);
        for (const optimizers::parameter_tensor& piece : shard_table_[static_cast<std::size_t>(s)].pieces)
          if (piece.kind != param_kind::statistic)
            std::memcpy(own + begin + piece.offset, owner + begin + piece.offset, piece.size * sizeof(float));
      }
    };
    each(gather);
  }

  void synchronize(arena& primary) {
    for (hook_owner& owner : hook_owners_) owner.primary = &primary;
    if constexpr (gathers) {
      if (stale_) {  // each replica's shard, every statistic and the frozen weights; the rest is gathered
        for (int r = 1; r < count; ++r) {
          float* to = weights_of(r, primary.data());
          const float* from = primary.template at<float>(0);
          const auto copy = [&](std::size_t at, std::size_t n) { std::memcpy(to + at, from + at, n * sizeof(float)); };
          copy(shards::begin(r), shards::size(r));
          for (const auto& [at, n] : statistics_) copy(at, n);
          copy(Net::trainable_floats, Net::parameter_floats - Net::trainable_floats);
        }
      }
      if (stale_ || whole_) free_weights(0, 0, Net::trainable_floats, primary);
      whole_ = false;
      stale_ = false;
      return;
    }
    if (!stale_) return;
    for (auto& replica : secondaries_) std::memcpy(replica->memory.data(), primary.data(), plan0::parameter_bytes);
    stale_ = false;
  }

  // A secondary's program for batch size N, set up once per size.
  template <int N>
  step_program<Net, N, cpu>& program_of(secondary& replica) {
    auto prepare_arena = [&replica](std::size_t bytes, std::size_t keep) {
      replica.context.weight_copies.clear();  // the new program's layers register theirs
      replica.context.native_bf16 = backend::cpu::native_bf16_products();
      replica.memory.reserve(bytes, keep);
      return replica.memory.data();
    };
    return replica.program.template set_up<step_program<Net, N, cpu>>(N, step_base_, prepare_arena, replica.context,
                                                                      replica.run);
  }

  // The mean of the replicas' gradients into replica 0's.
  void all_reduce_gradients(float* sum) {
    const float* others[count > 1 ? count - 1 : 1] = {};
    for (int r = 1; r < count; ++r)
      others[r - 1] = secondaries_[r - 1]->memory.template at<float>(plan0::gradients_offset);
    constexpr float mean = 1.f / count;
    typeflow::parallel_for(static_cast<std::ptrdiff_t>(Net::trainable_floats), [&](std::ptrdiff_t i) {
      float total = sum[i];
      for (int r = 0; r < count - 1; ++r) total += others[r][i];
      sum[i] = total * mean;
    });
  }

  std::vector<std::unique_ptr<secondary>> secondaries_;
  std::unique_ptr<replica_pool> pool_;
  bool stale_ = true;
  bool statistics_weighed_ = false;  // weigh_statistics()'s
  std::array<float, count> statistics_weights_{};
  // Where a secondary's step region starts: after its slot shards (zero<k>).
  std::size_t step_base_ = plan0::slots_offset;
  // zero<k>: each shard's pieces of the tensors, the optimizer's slot count,
  // and sharded_update()'s arguments and slot pointers (count x slots).
  std::vector<optimizers::region_shard> shard_table_;
  int slots_ = 0;
  optimizers::update_arguments shard_arguments_[count];
  std::vector<float*> slot_pointers_;
  // zero<3>: where the statistics are ([at, at + n) floats), and each replica's hooks.
  std::vector<std::pair<std::size_t, std::size_t>> statistics_;
  std::array<hook_owner, count> hook_owners_{};
  std::array<parameter_hooks, count> hooks_{};
  replica_barrier barrier_{count};
  bool whole_ = true;  // replica 0's weights: gathered whole (or not yet freed)
  bool tracking_ = false;
  std::array<std::size_t, count> peak_{};
  std::array<gather_window, reduces_per_unit ? count : 0> windows_;  // zero<2|3>: each replica's pages for one unit
};

}  // namespace typeflow

// zero<k, multi_worker> on the CPU: sharding across processes, a part of the
// CPU engine (train/cpu_engine.hpp; distribute/zero.hpp describes the
// strategy, train/cpu_replicas.hpp shards within one process). Each worker
// is one replica and owns one shard of the trainable region [0, T), cut at
// run time into as many shards as the job has workers (shard_bounds):
//
//   reduce_gradients()  after backward: zero<1> the mean of the whole
//                   gradient, as multi_worker's all-reduce; zero<2|3>
//                   nothing: backward_sharded() reduce-scattered each unit's
//                   gradients as its backward ended (the worker's shard of
//                   the mean, in place), and freed the rest;
//   all_updatable(), unscale_all_finite(), apply_regularizers_to_shards()
//                   zero<2>'s per-gradient steps over the worker's shard,
//                   one verdict (and one penalty) for all, summed over the
//                   workers;
//   sharded_update()  the update's arguments for the worker's shard (its
//                   weights, the mean gradient, its slot shards), with
//                   zero<2>'s norms summed over the workers;
//   after_update()  the all-gather: every worker's updated shard to every
//                   worker. batch_norm's moving statistics stay each
//                   worker's own, as under multi_worker.
//
// zero<3, multi_worker> also shards the weights, as zero<3, mirrored<N>>
// does within a process (train/cpu_replicas.hpp says how): each unit's
// weights are all-gathered over the unit's range just before its forward
// and again before its backward, and freed after; as its backward ends, a
// reduce-scatter over the unit's range leaves this worker its shard's part
// of the mean gradient, and the rest is freed (forward_sharded(),
// backward_sharded(), and the combinators' children through the hooks).
// The update reads only the shard, and no all-gather follows. What reads
// the weights outside a step (evaluate, predict, generate, parameters(),
// save_weights, loading a checkpoint) gathers them whole first
// (make_whole(): a collective, which every worker calls), and the next step
// frees them; a checkpoint's save writes each worker's shard instead.
//
// The arena is the engine's, its slots one shard each (slot_stride(): ceil(T
// / W) rounded up to 16 floats), so W workers' slots take the memory of one
// worker's under multi_worker. gather_gradients() and gather_slot() are
// collectives: every worker calls them (model<>'s save_checkpoint does, on
// every rank).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "typeflow/contract/layer.hpp"
#include "typeflow/distribute/layer_groups.hpp"
#include "typeflow/distribute/zero.hpp"
#include "typeflow/model/memory_plan.hpp"
#include "typeflow/optimizers/sharded_update.hpp"
#include "typeflow/precision/loss_scale.hpp"
#include "typeflow/train/non_finite.hpp"
#include "typeflow/train/parameter_table.hpp"
#include "typeflow/train/regularization.hpp"
#include "typeflow/train/shard_units.hpp"

namespace typeflow {

template <class Net, class Strategy>
class cpu_worker_shards {
  using plan0 = memory_plan<Net, 0, 0>;
  using workers_type = typename Strategy::sharded_strategy;  // multi_worker
  static constexpr std::size_t trainable = Net::trainable_floats;

 public:
  static constexpr int stage = zero_stage_v<Strategy>;
  // zero<2|3>: each unit's gradients reduce-scattered as its backward ends;
  // zero<3>: the weights sharded too, each unit's gathered for it.
  static constexpr bool reduces_per_unit = stage >= 2;
  static constexpr bool gathers = stage >= 3;
  using groups = layer_groups<Net>;

  explicit cpu_worker_shards(const workers_type& workers)
      : workers_(&workers),
        count_(workers.size()),
        rank_(workers.rank()),
        bounds_(shard_bounds(trainable, count_)) {
    std::vector<std::ptrdiff_t> cut(bounds_.begin(), bounds_.end());
    table_ = optimizers::cut_region(parameter_table<Net>::tensors(), cut);
    // The statistics in other workers' shards, which the all-gather would
    // overwrite with their owners'.
    for (int s = 0; s < count_; ++s) {
      if (s == rank_) continue;
      for (const optimizers::parameter_tensor& piece : table_[static_cast<std::size_t>(s)].pieces)
        if (piece.kind == param_kind::statistic)
          kept_statistics_.push_back({bounds_[static_cast<std::size_t>(s)] + piece.offset, piece.size, piece.kind});
    }
    std::size_t kept = 0;
    for (const auto& piece : kept_statistics_) kept += piece.size;
    statistics_copy_.resize(kept);
    statistics_ = trainable_statistics<Net>();
    unit_bounds_.resize(bounds_.size());
  }
  cpu_worker_shards(const cpu_worker_shards&) = delete;  // the hooks point at it
  cpu_worker_shards& operator=(const cpu_worker_shards&) = delete;

  int workers() const { return count_; }
  // The bytes of one optimizer slot in the arena: one shard.
  std::size_t slot_stride() const { return shard_length(trainable, count_) * sizeof(float); }
  std::size_t begin() const { return bounds_[static_cast<std::size_t>(rank_)]; }
  std::size_t size() const { return bounds_[static_cast<std::size_t>(rank_) + 1] - begin(); }

  void compiled(int slots) { slot_pointers_.assign(static_cast<std::size_t>(slots), nullptr); }

  // After backward: the mean gradient (zero<1>) or this worker's shard of it (zero<2>).
  void reduce_gradients(std::byte* arena) const {
    if constexpr (reduces_per_unit)
      return;  // zero<2|3>: reduced unit by unit as backward went
    else if constexpr (stage >= 2)
      workers_->reduce_scatter_mean(gradients(arena), bounds_);
    else
      workers_->all_reduce_mean(gradients(arena), trainable);
  }

  // zero<2>'s steps over the worker's shard of the mean gradient, one
  // verdict for every worker (train/cpu_replicas.hpp says what each is).
  bool all_updatable(std::byte* arena) const {
    return on_every_worker(all_updatable_parallel(gradients(arena) + begin(), size()),
                           "the gradients' non-finite verdict");
  }
  bool unscale_all_finite(std::byte* arena, float scale) const {
    return on_every_worker(precision::unscale_all_finite(gradients(arena) + begin(), size(), scale),
                           "the loss scale's verdict");
  }
  // Whether `ok` holds on every worker (multi_worker::all_agree).
  bool on_every_worker(bool ok, const char* operation = "the loss's non-finite verdict") const {
    return workers_->all_agree(ok, operation);
  }
  // `work` here, and whether it succeeded on every worker (distribute::all_or_none).
  template <class Work>
  void all_or_none(const std::string& step, Work&& work) const {
    distribute::all_or_none(*workers_, step, std::forward<Work>(work));
  }
  double apply_regularizers_to_shards(std::byte* arena) const { return regularize_shard(arena, true); }
  // zero<3>: the penalty alone (evaluate, a skipped step), from the owners'
  // weights: outside its shard a worker's are freed.
  double regularization_penalty(std::byte* arena) const { return regularize_shard(arena, false); }

  // The update's arguments for this worker's shard alone; `arena` is the engine's.
  optimizers::sharded_update sharded_update(std::byte* arena, std::int64_t iteration) {
    for (std::size_t s = 0; s < slot_pointers_.size(); ++s) slot_pointers_[s] = slot_shard(static_cast<int>(s), arena);
    optimizers::update_arguments& a = arguments_;
    a = {};
    a.weights = reinterpret_cast<float*>(arena) + begin();
    a.grads = gradients(arena) + begin();
    a.slots = slot_pointers_.data();
    a.floats = static_cast<std::ptrdiff_t>(size());
    a.tensors = table_[static_cast<std::size_t>(rank_)].pieces;
    a.iteration = iteration;
    optimizers::sharded_update u{parameter_table<Net>::tensors(),
                                 {&table_[static_cast<std::size_t>(rank_)], 1},
                                 {&arguments_, 1},
                                 stage >= 2 ? nullptr : gradients(arena),
                                 {[](void*, optimizers::shard_runner::job job, void* context) { job(context, 0); },
                                  nullptr}};
    if constexpr (stage >= 2) {
      u.sum_across = [](void* workers, double* norms, std::size_t n) {
        static_cast<const workers_type*>(workers)->all_reduce_sum(norms, n, "the gradient norms' sum");
      };
      u.sum_context = const_cast<workers_type*>(workers_);
    }
    return u;
  }

  // After an update: every shard's weights from its owner (statistics stay;
  // zero<3>: none, the next step gathers).
  void after_update(float* weights) {
    if constexpr (gathers) return;
    all_gather_weights(weights, 0, trainable, "the all-gather of the updated weights");
  }

  // zero<3>: this worker's forward, unit by unit: each unit's weights
  // gathered from their owners before it and freed after.
  template <class Program>
  void forward_sharded(Program& program, arena& memory) {
    static_assert(gathers, "cpu_worker_shards::forward_sharded: only under zero<3>");
    start_units(memory);
    for (std::size_t i = 0; i < groups::count; ++i) {
      if (groups::per_child[i]) {  // the combinator's hooks gather child by child
        program.forward_layer(i);
        continue;
      }
      gather_layer(i);
      program.forward_layer(i);
      free_layer_weights(i);
    }
  }
  // zero<2|3>: the backward, unit by unit from the top: (zero<3>: the
  // weights gathered,) the unit's backward, its gradients reduce-scattered
  // (this worker keeps its shard's part of the mean), the rest of them (and
  // the weights) freed.
  template <class Program>
  void backward_sharded(Program& program, arena& memory) {
    static_assert(reduces_per_unit, "cpu_worker_shards::backward_sharded: only under zero<2|3>");
    memory_ = &memory;
    if constexpr (!gathers) window_.map(memory);  // zero<2>: no gradient is held now
    backward_ = true;
    struct leave {
      bool& flag;
      ~leave() { flag = false; }
    } in_backward{backward_};
    for (std::size_t k = groups::count; k-- > 0;) {
      if (groups::per_child[k]) {
        program.backward_layer(k);
        continue;
      }
      if constexpr (gathers)
        gather_layer(k);
      else
        window_.begin_unit();
      if (!groups::is_tied_source[k]) open_unit_gradients(groups::own[k].begin, groups::own[k].end);
      program.backward_layer(k);
      reduce_unit(groups::own[k].begin, groups::own[k].end);
      if constexpr (gathers) free_layer_weights(k);
    }
  }
  // zero<3>: the whole trainable region gathered, for whatever reads the
  // weights outside a step (a collective: every worker calls it); the next
  // step frees it again.
  void make_whole(arena& memory) {
    if constexpr (gathers) {
      if (whole_) return;
      memory.unalias();  // the whole region private again; the next step maps the window anew
      memory_ = &memory;
      gather(0, trainable, std::nullopt);
      whole_ = true;
    }
  }
  // zero<2|3>: the combinators' hooks, for the engine's run_state.
  const parameter_hooks* hooks() {
    hooks_ = {this, &hook_before, &hook_after_forward, &hook_after_backward};
    return &hooks_;
  }
  // zero<3>: the window's bytes (its pages shared by every unit), and the
  // most this worker's weights, gradients and slots held after a gather since
  // track_peaks(true), bound to `state_bytes` (the region before the step's).
  std::size_t window_bytes() const { return window_.resident_bytes(); }
  void track_peaks(bool on, std::size_t state_bytes) {
    tracking_ = on;
    state_bytes_ = state_bytes;
    peak_ = 0;
  }
  std::size_t peak() const { return peak_; }

  // Collectives: the mean gradient (zero<2>) and slot s, whole, into `into`
  // (trainable floats); and slot s's shard taken from a whole `from`.
  void gather_gradients(const std::byte* arena, float* into) const {
    std::copy_n(reinterpret_cast<const float*>(arena + plan0::gradients_offset) + begin(), size(), into + begin());
    workers_->all_gather(into, bounds_, "the gradients' all-gather");
  }
  void gather_slot(int s, std::byte* arena, float* into) const {
    std::copy_n(slot_shard(s, arena), size(), into + begin());
    workers_->all_gather(into, bounds_, "the all-gather of an optimizer slot");
  }
  void scatter_slot(int s, std::byte* arena, const float* from) const {
    std::copy_n(from + begin(), size(), slot_shard(s, arena));
  }
  // zero<k>'s checkpoint shards: the cut (one shard per worker), the one
  // this worker holds and its part of slot s.
  std::vector<std::size_t> shard_cut() const { return bounds_; }
  std::vector<int> held_shards() const { return {rank_}; }
  std::span<float> slot_shard_floats(int index, int s, std::byte* arena) const {
    if (index != rank_)
      throw std::logic_error("slot_shard_floats: worker " + std::to_string(rank_) + " holds shard " +
                             std::to_string(rank_) + ", not " + std::to_string(index));
    return {slot_shard(s, arena), size()};
  }

 private:
  static float* gradients(std::byte* arena) { return reinterpret_cast<float*>(arena + plan0::gradients_offset); }

  // The regularizers over this worker's shard (adding their gradients, or
  // not), the penalty summed over the workers.
  double regularize_shard(std::byte* arena, bool add_gradients) const {
    const float* weights = reinterpret_cast<const float*>(arena);
    float* grads = gradients(arena);
    double total = 0;
    for_each_regularized<Net>([&]<class Regularizer>(std::size_t offset, std::size_t floats) {
      const std::size_t first = offset / sizeof(float);
      const std::size_t from = std::max(first, begin()), to = std::min(first + floats, begin() + size());
      if (from < to)
        total += add_gradients ? Regularizer::apply(weights + from, grads + from, to - from)
                               : Regularizer::penalty(weights + from, to - from);
    });
    workers_->all_reduce_sum(&total, 1, "the regularizers' penalty");
    return total;
  }
  // zero<3>'s units (train/shard_units.hpp) over this worker's shard.
  template <class F>
  void outside_shard(std::size_t from, std::size_t to, F&& f) const {
    outside_own(begin(), begin() + size(), from, to, std::forward<F>(f));
  }
  // The weights [from, to) from their owners; this worker's statistics in
  // other shards stay its own, as under multi_worker.
  void all_gather_weights(float* weights, std::size_t from, std::size_t to, const char* operation) {
    const auto inside = [&](const optimizers::parameter_tensor& piece) {
      return piece.offset < to && piece.offset + piece.size > from;
    };
    float* kept = statistics_copy_.data();
    for (const auto& piece : kept_statistics_)
      if (inside(piece)) kept = std::copy_n(weights + piece.offset, piece.size, kept);
    workers_->all_gather(weights + from, unit_bounds(from, to), operation);
    kept = statistics_copy_.data();
    for (const auto& piece : kept_statistics_)
      if (inside(piece)) {
        std::copy_n(kept, piece.size, weights + piece.offset);
        kept += piece.size;
      }
  }
  // A unit's bounds for the collectives: the job's cut, clipped to [from, to)
  // and counted from `from`.
  std::span<const std::size_t> unit_bounds(std::size_t from, std::size_t to) {
    for (std::size_t w = 0; w < bounds_.size(); ++w) unit_bounds_[w] = std::clamp(bounds_[w], from, to) - from;
    return unit_bounds_;
  }
  // The first step's units, or after make_whole: the weights outside the
  // shard freed, the window mapped over what the steps have gathered.
  void start_units(arena& memory) {
    memory_ = &memory;
    if (whole_) {
      free_weights(0, trainable);
      whole_ = false;
    }
    window_.map(memory);
  }
  // [from, to)'s weights from their owners, noted as `part` of the current
  // unit in the window (make_whole's whole region: not noted). This worker's
  // statistics outside its shard stay its own.
  void gather(std::size_t from, std::size_t to, std::optional<gather_window::part> part = gather_window::weights) {
    float* weights = memory_->template at<float>(0);
    if (part)
      outside_shard(from, to, [&](std::size_t a, std::size_t b) {
        without_statistics(statistics_, a, b, [&](std::size_t at, std::size_t n) {
          window_.note(*part, at * sizeof(float), n * sizeof(float));
        });
      });
    all_gather_weights(weights, from, to, "a zero<3> unit's all-gather of its weights");
    note_peak();
  }
  void free_weights(std::size_t from, std::size_t to) {
    outside_shard(from, to, [&](std::size_t a, std::size_t b) {
      without_statistics(statistics_, a, b, [&](std::size_t at, std::size_t n) {
        memory_->release(at * sizeof(float), n * sizeof(float));
      });
    });
  }
  void open_unit_gradients(std::size_t from, std::size_t to) {
    outside_shard(from, to, [&](std::size_t a, std::size_t b) {
      open_gradients(window_, *memory_, plan0::gradients_offset, a, b);
    });
  }
  // After the unit's backward: this worker's shard's part of its mean
  // gradient, then the rest of its gradients freed.
  void reduce_unit(std::size_t from, std::size_t to) {
    if (from >= to) return;
    note_peak();
    workers_->reduce_scatter_mean(gradients(memory_->data()) + from, unit_bounds(from, to),
                                  "a unit's gradient reduce-scatter");
    outside_shard(from, to, [&](std::size_t a, std::size_t b) {
      memory_->release(plan0::gradients_offset + a * sizeof(float), (b - a) * sizeof(float));
    });
  }
  // A top-level layer that is not a combinator: its weights and a tied matrix.
  void gather_layer(std::size_t i) {
    window_.begin_unit();
    for_each_layer_range<groups>(i, [&](std::size_t from, std::size_t to, gather_window::part part) {
      gather(from, to, part);
    });
  }
  void free_layer_weights(std::size_t i) {
    for_each_layer_range<groups>(i, [&](std::size_t from, std::size_t to, auto) { free_weights(from, to); });
  }
  void note_peak() {
    if (tracking_) peak_ = std::max(peak_, memory_->resident_bytes(0, state_bytes_) + window_.resident_bytes());
  }
  // The combinators' children, through parameter_hooks: params is the
  // child's first weight in this worker's arena.
  std::pair<std::size_t, std::size_t> unit_of(const float* params, std::size_t floats) const {
    const std::size_t at = static_cast<std::size_t>(params - memory_->template at<float>(0));
    return {at, at + floats};
  }
  // (zero<2> holds the weights whole: its hooks only reduce, in backward;
  // its forward, evaluate's and predict's, call them with no arena set.)
  static void hook_before(void* owner, const float* params, std::size_t floats) {
    auto& self = *static_cast<cpu_worker_shards*>(owner);
    if (!gathers && !self.backward_) return;
    const auto [from, to] = self.unit_of(params, floats);
    self.window_.begin_unit();
    if constexpr (gathers) self.gather(from, to);
    if (self.backward_) self.open_unit_gradients(from, to);
  }
  static void hook_after_forward(void* owner, const float* params, std::size_t floats) {
    if constexpr (gathers) {
      auto& self = *static_cast<cpu_worker_shards*>(owner);
      const auto [from, to] = self.unit_of(params, floats);
      self.free_weights(from, to);
    }
  }
  static void hook_after_backward(void* owner, const float* params, std::size_t floats) {
    auto& self = *static_cast<cpu_worker_shards*>(owner);
    const auto [from, to] = self.unit_of(params, floats);
    self.reduce_unit(from, to);
    if constexpr (gathers) self.free_weights(from, to);
  }
  float* slot_shard(int s, std::byte* arena) const {
    return reinterpret_cast<float*>(arena + plan0::slots_offset + static_cast<std::size_t>(s) * slot_stride());
  }

  const workers_type* workers_;
  int count_, rank_;
  std::vector<std::size_t> bounds_;  // count_ + 1
  std::vector<optimizers::region_shard> table_;
  std::vector<optimizers::parameter_tensor> kept_statistics_;  // offsets from the region's start
  std::vector<float> statistics_copy_;
  // zero<3>:
  std::vector<std::pair<std::size_t, std::size_t>> statistics_;  // all of them in the trainable region
  std::vector<std::size_t> unit_bounds_;                         // count_ + 1, for one unit's collectives
  arena* memory_ = nullptr;  // the engine's, set as a step (or make_whole) begins
  gather_window window_;
  parameter_hooks hooks_{};
  bool whole_ = true;  // the weights whole (at first, and after make_whole)
  bool backward_ = false;
  bool tracking_ = false;
  std::size_t state_bytes_ = 0, peak_ = 0;
  optimizers::update_arguments arguments_;
  std::vector<float*> slot_pointers_;
};

}  // namespace typeflow

// zero<k, multi_worker> on the CPU: sharding across processes, a part of the
// CPU engine (train/cpu_engine.hpp; distribute/zero.hpp describes the
// strategy, train/cpu_replicas.hpp shards within one process). Each worker
// is one replica and owns one shard of the trainable region [0, T), cut at
// run time into as many shards as the job has workers (shard_bounds):
//
//   reduce_gradients()  after backward: zero<1> the mean of the whole
//                   gradient, as multi_worker's all-reduce; zero<2> a
//                   reduce-scatter: the worker's shard of the mean, in place
//                   in its gradient region;
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
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "typeflow/distribute/zero.hpp"
#include "typeflow/model/memory_plan.hpp"
#include "typeflow/optimizers/sharded_update.hpp"
#include "typeflow/precision/loss_scale.hpp"
#include "typeflow/train/non_finite.hpp"
#include "typeflow/train/parameter_table.hpp"
#include "typeflow/train/regularization.hpp"

namespace typeflow {

template <class Net, class Strategy>
class cpu_worker_shards {
  using plan0 = memory_plan<Net, 0, 0>;
  using workers_type = typename Strategy::sharded_strategy;  // multi_worker
  static constexpr std::size_t trainable = Net::trainable_floats;

 public:
  static constexpr int stage = zero_stage_v<Strategy>;

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
  }

  int workers() const { return count_; }
  // The bytes of one optimizer slot in the arena: one shard.
  std::size_t slot_stride() const { return shard_length(trainable, count_) * sizeof(float); }
  std::size_t begin() const { return bounds_[static_cast<std::size_t>(rank_)]; }
  std::size_t size() const { return bounds_[static_cast<std::size_t>(rank_) + 1] - begin(); }

  void compiled(int slots) { slot_pointers_.assign(static_cast<std::size_t>(slots), nullptr); }

  // After backward: the mean gradient (zero<1>) or this worker's shard of it (zero<2>).
  void reduce_gradients(std::byte* arena) const {
    if constexpr (stage >= 2)
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
  // Whether `ok` holds on every worker: a verdict that all take alike, so
  // that none skips a collective the others run (a loss that is not finite
  // on one worker stops the step on all).
  bool on_every_worker(bool ok, const char* operation = "the loss's non-finite verdict") const {
    double refused = ok ? 0 : 1;
    workers_->all_reduce_sum(&refused, 1, operation);
    return refused == 0;
  }
  // Runs `work` here and learns whether it succeeded on every worker: its
  // exception is thrown again where it was thrown, and the workers where it
  // succeeded throw one naming the step, so that none goes on to a
  // collective that another left (a sharded checkpoint's save and load).
  template <class Work>
  void all_or_none(const std::string& step, Work&& work) const {
    std::exception_ptr failed;
    try {
      work();
    } catch (...) {
      failed = std::current_exception();
    }
    if (on_every_worker(!failed, "a sharded checkpoint's verdict")) return;
    if (failed) std::rethrow_exception(failed);
    throw std::runtime_error(step + ": another worker failed (its error is in its output); worker " +
                             std::to_string(rank_) + " stopped too, changing nothing");
  }
  double apply_regularizers_to_shards(std::byte* arena) const {
    const float* weights = reinterpret_cast<const float*>(arena);
    float* grads = gradients(arena);
    double total = 0;
    for_each_regularized<Net>([&]<class Regularizer>(std::size_t offset, std::size_t floats) {
      const std::size_t first = offset / sizeof(float);
      const std::size_t from = std::max(first, begin()), to = std::min(first + floats, begin() + size());
      if (from < to) total += Regularizer::apply(weights + from, grads + from, to - from);
    });
    workers_->all_reduce_sum(&total, 1, "the regularizers' penalty");
    return total;
  }

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

  // After an update: every shard's weights from its owner (statistics stay).
  void after_update(float* weights) {
    float* kept = statistics_copy_.data();
    for (const auto& piece : kept_statistics_) kept = std::copy_n(weights + piece.offset, piece.size, kept);
    workers_->all_gather(weights, bounds_);
    kept = statistics_copy_.data();
    for (const auto& piece : kept_statistics_) {
      std::copy_n(kept, piece.size, weights + piece.offset);
      kept += piece.size;
    }
  }

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
  float* slot_shard(int s, std::byte* arena) const {
    return reinterpret_cast<float*>(arena + plan0::slots_offset + static_cast<std::size_t>(s) * slot_stride());
  }

  const workers_type* workers_;
  int count_, rank_;
  std::vector<std::size_t> bounds_;  // count_ + 1
  std::vector<optimizers::region_shard> table_;
  std::vector<optimizers::parameter_tensor> kept_statistics_;  // offsets from the region's start
  std::vector<float> statistics_copy_;
  optimizers::update_arguments arguments_;
  std::vector<float*> slot_pointers_;
};

}  // namespace typeflow

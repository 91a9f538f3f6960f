// training_steps<Net, LossScaling, Ops>: one training step, written once for
// both devices; fit_loop's steps (fit_loop.hpp) and train_on_batch's.
//
// Every device runs the same sequence:
//   stage    the batch's class ids checked (a bad one is refused when its
//            own step would start), the device's checks, the batch toward
//            the replicas;
//   launch   the step's counters; on every replica: its shard into the
//            input, forward, the loss (its rows and d(loss)/d(output)), the
//            loss scale on that gradient; backward, with the strategy's
//            all-reduce (the gradients' mean over the replicas and the
//            workers); the update: the NaN policy's verdict, unscaling,
//            the regularizers, the optimizer;
//   finish   the step's outcome on the host: the NaN policy's error, the
//            iteration count, the loss and penalty means, the metrics.
// What the devices differ in is how, and that is all their Ops say: the
// CPU runs the launch at once (the replicas in their threads); one GPU
// captures it once as a CUDA graph and replays it; several GPUs, or
// workers, enqueue it with NCCL between the replicas' layers.
//
// A last partial batch (valid < N samples) trains, on both devices: the
// padding rows are zeros with no loss and no gradient, so every product runs
// on the full batch and the gradients are those of the valid rows; the
// loss's mean, the metrics and the means fit logs count the valid rows only,
// as Keras does. Under mirrored<N> each replica takes its share of the valid
// samples (replica_valid), and its loss gradient is weighed by that share so
// that the all-reduce gives the mean over them. The CPU's loss takes the
// valid row count; a GPU's captured step keeps its row count and weighs its
// rows instead (train/row_weights.hpp). batch_norm's statistics count the
// valid samples only (run_state::valid_samples on the CPU, the step values'
// valid_samples on a GPU).
//
// Ops (train/cpu_engine.hpp's and train/cuda_engine.hpp's engine::step_ops)
// provide, for one batch type:
//   batch_type, shard (samples per replica; the batch's size / shard replicas in this process)
//   check(batch)                       the device's own checks (may throw std::logic_error)
//   stage(batch, parity)               batch k (parity k % 2) toward the replicas
//   begin(parity, samples)             the step's counters; samples: the batch's valid ones
//   record(parity, body)               runs body(), or captures it once and replays it
//   each_replica(parity, f)            f(replica) on every replica; a replica has
//                                      forward(), loss(), scale_output_gradient()
//   backward_and_all_reduce()
//   update()
//   outcome(parity) -> step_outcome    waits for the step
//   outputs(r, parity), labels(r, parity)   replica r's, for the metrics
//   metric_hits(r, parity, i)          metric i's hits on replica r, where the
//                                      device counted them (metrics.hpp's
//                                      device_hits), else none
//   e                                  the engine, which the step asks for
//                                      gradients() (the NaN policy's error),
//                                      evaluate(data, callbacks) (validation),
//                                      loss_scale() and skipped_steps()
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <stdexcept>
#include <utility>

#include "typeflow/data/any_dataset.hpp"
#include "typeflow/distribute/mirrored.hpp"
#include "typeflow/train/label_check.hpp"
#include "typeflow/train/non_finite.hpp"
#include "typeflow/train/row_weights.hpp"
#include "typeflow/train/training_state.hpp"

namespace typeflow {

// Each replica's samples: mirrored<N> splits the global batch into N equal shards.
template <class Strategy, int Batch>
constexpr int shard_of() {
  static_assert(strategy_check<Strategy, global_batch<Batch>, Batch % Strategy::replicas == 0>::passed,
                "mirrored<N>: the global batch must split into N equal shards; choose a batch size that N divides");
  return Batch / Strategy::replicas;
}

// What a finished step tells the host.
struct step_outcome {
  double loss = 0;     // the mean loss over this process's replicas
  double penalty = 0;  // the regularizers' (0 without)
  // Outside mixed_float16: the update was refused for a gradient that may
  // not reach it (train/non_finite.hpp); the weights are the last good step's.
  bool gradients_refused = false;
  std::int64_t iterations = 0;  // the optimizer's after the step (a skipped or accumulating step adds none)
  // Across processes, where each worker's loss is its own shard's: the update
  // was refused for another worker's loss, not finite where this one's is.
  bool loss_refused_elsewhere = false;
};

// The samples of a batch of `valid` that replica r of `replicas` takes,
// `shard` each: its consecutive share, fewer (or none) in a last partial batch.
constexpr int replica_valid(int valid, int r, int shard) {
  const int left = valid - r * shard;
  return left <= 0 ? 0 : (left < shard ? left : shard);
}

template <class Net, bool LossScaling, class Ops>
class training_steps {
  using batch_type = typename Ops::batch_type;
  static constexpr int replicas = batch_type::size / Ops::shard;  // in this process
  static constexpr int classes = training_state<Net>::classes;
  static constexpr std::size_t rows_per_sample = training_state<Net>::rows_per_sample;

 public:
  training_steps(training_state<Net>& training, Ops ops) : training_(training), ops_(std::move(ops)) {}

  void stage(const batch_type& batch, int parity) {
    // Batch k + 1 is staged while step k runs: a bad label is refused when
    // its own step would start, after step k has finished.
    std::exception_ptr& refused = refused_[static_cast<std::size_t>(parity)];
    refused = nullptr;
    try {
      check_labels<classes>(batch.labels.data(), static_cast<std::ptrdiff_t>(batch_type::size * rows_per_sample));
      check_sample_weights(batch, !training_.class_weights.empty(), "fit");
      ops_.check(batch);
    } catch (const std::logic_error&) {  // invalid_argument, out_of_range
      refused = std::current_exception();
      return;
    }
    valid_[static_cast<std::size_t>(parity)] = batch.valid;
    ops_.stage(batch, parity);
  }

  void launch(int parity) {
    if (refused_[static_cast<std::size_t>(parity)])
      std::rethrow_exception(std::exchange(refused_[static_cast<std::size_t>(parity)], nullptr));
    ops_.begin(parity, valid_[static_cast<std::size_t>(parity)]);
    ops_.record(parity, [this, parity] {
      ops_.each_replica(parity, [](auto& replica) {
        replica.forward();
        replica.loss();
        replica.scale_output_gradient();
      });
      ops_.backward_and_all_reduce();
      ops_.update();
    });
  }

  // Waits for the step; returns its loss (with the regularizers' penalty).
  double finish(int parity) {
    const step_outcome outcome = ops_.outcome(parity);
    const double loss = outcome.loss + outcome.penalty;
    // The NaN policy (train/non_finite.hpp): the weights are the last good
    // step's (both devices refuse the update for a non-finite loss too).
    if constexpr (!LossScaling) {
      if (!std::isfinite(loss)) throw non_finite_loss(loss);
      if (outcome.loss_refused_elsewhere) throw non_finite_loss_elsewhere(loss);
      if (outcome.gradients_refused) throw non_finite_gradient<Net>(ops_.e.gradients().data());
    }
    training_.iterations = outcome.iterations;
    const int samples = valid_[static_cast<std::size_t>(parity)];
    if constexpr (Net::has_regularizers) training_.regularization_mean.update(outcome.penalty, samples);
    training_.loss_mean.update(loss, samples);
    for (int r = 0; r < replicas; ++r) {
      const std::ptrdiff_t rows =
          static_cast<std::ptrdiff_t>(replica_valid(samples, r, Ops::shard)) * static_cast<std::ptrdiff_t>(rows_per_sample);
      if (rows == 0) continue;
      for (std::size_t i = 0; i < training_.metrics.size(); ++i) {
        auto& m = training_.metrics[i];
        if (const std::optional<double> hits = ops_.metric_hits(r, parity, i))  // counted on the device
          m->add_hits(*hits, rows);
        else
          m->update(ops_.outputs(r, parity), ops_.labels(r, parity), rows, classes);
      }
    }
    return loss;
  }

  void validate(const data::any_dataset<batch_type>& data, std::span<callback* const> callbacks) {
    ops_.e.evaluate(data, callbacks);
  }
  // The valid samples of the batch staged at `parity` (a partial batch's
  // fewer): fit's mfu and tokens/s count them.
  int samples(int parity) const { return valid_[static_cast<std::size_t>(parity)]; }
  float loss_scale() const { return ops_.e.loss_scale(); }
  std::int64_t skipped_steps() const { return ops_.e.skipped_steps(); }

 private:
  training_state<Net>& training_;
  Ops ops_;
  std::array<std::exception_ptr, 2> refused_;  // a staged batch's bad labels, thrown at its launch
  std::array<int, 2> valid_{};                 // each staged batch's samples
};

}  // namespace typeflow

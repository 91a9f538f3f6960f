// mirrored<N> on the CPU: the replication algorithm (distribute/mirrored.hpp
// describes the strategy; this is its CPU half), a part of the CPU engine
// (train/cpu_engine.hpp): the replicas are step programs of their own.
//
// The engine's own arena is replica 0; replicas 1 .. N-1 live here, each with
// its own arena (weights and gradients, no optimizer slots, and its own
// activations), run state and oneDNN context, and the threads that run them
// (replica_pool, the cores divided among the replicas). One step:
//   synchronize()   replica 0's weights to the others, if they changed from outside;
//   step()          each replica's shard into its input, forward, loss and
//                   backward on every replica at once, then the mean of the
//                   gradients into replica 0's, summed in replica order
//                   element by element (no dependence on thread timing);
//   after_update()  the updated weights from replica 0 to the others (and
//                   the mean of batch_norm's statistics under
//                   sync_batch_norm_statistics).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include <omp.h>

#include "typeflow/backend/cpu/context.hpp"
#include "typeflow/core/parallel.hpp"
#include "typeflow/core/random.hpp"
#include "typeflow/distribute/mirrored.hpp"
#include "typeflow/distribute/replica_seeds.hpp"
#include "typeflow/model/memory_plan.hpp"
#include "typeflow/train/arena.hpp"
#include "typeflow/train/parameter_table.hpp"
#include "typeflow/train/program_slot.hpp"
#include "typeflow/train/step_program.hpp"

namespace typeflow {

template <class Net, class Strategy>
class cpu_replicas {
  using plan0 = memory_plan<Net, 0, 0>;

 public:
  static constexpr int count = Strategy::replicas;

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

  // Replica r's parameter region (r >= 1).
  std::span<const float> parameter_region(int r) const {
    return {secondaries_.at(static_cast<std::size_t>(r - 1))->memory.template at<float>(0), Net::parameter_floats};
  }

  // One step's forward and backward over the N shards of `batch`: replica 0
  // runs on `primary` (the engine's program for the shard size) with
  // `primary_run`; shard_step(program, run, labels) runs one replica's
  // forward, loss and backward and returns its mean loss. Afterwards replica
  // 0's gradients hold the mean over the replicas; returns the mean loss.
  // programs[r] is left pointing at replica r's program (for the metrics).
  template <class Batch, class Program, class ShardStep>
  double step(const Batch& batch, Program& primary, run_state& primary_run, std::byte* primary_arena,
              Program* (&programs)[count], ShardStep&& shard_step) {
    constexpr int shard = Program::batch_size;
    constexpr std::size_t features_per_shard = shard * Batch::features_type::size;
    constexpr std::size_t labels_per_shard = shard * Batch::label_type::size;
    synchronize(primary_arena);
    programs[0] = &primary;
    for (int r = 1; r < count; ++r) programs[r] = &program_of<shard>(*secondaries_[r - 1]);
    for (int r = 0; r < count; ++r)
      std::memcpy(programs[r]->input(), batch.features.data() + r * features_per_shard,
                  features_per_shard * sizeof(batch.features.data()[0]));
    double losses[count] = {};
    auto job = [&](int r) {
      run_state& run = r == 0 ? primary_run : secondaries_[r - 1]->run;
      losses[r] = shard_step(*programs[r], run, batch.labels.data() + r * labels_per_shard);
    };
    using job_type = decltype(job);
    pool_->run([](void* context, int r) { (*static_cast<job_type*>(context))(r); }, &job);
    all_reduce_gradients(reinterpret_cast<float*>(primary_arena + plan0::gradients_offset));
    double loss = 0;
    for (double l : losses) loss += l / count;
    return loss;
  }

  // After an optimizer update on replica 0: the trainable weights to the
  // others (each replica keeps its own statistics), and with
  // sync_batch_norm_statistics the replicas' mean statistics to all.
  void after_update(float* primary) {
    for (const auto& t : parameter_table<Net>::tensors()) {
      if (t.kind == param_kind::statistic) continue;
      for (auto& replica : secondaries_)
        std::memcpy(replica->memory.template at<float>(0) + t.offset, primary + t.offset, t.size * sizeof(float));
    }
    if constexpr (Strategy::sync_statistics) {
      for (const auto& t : parameter_table<Net>::tensors()) {
        if (t.kind != param_kind::statistic) continue;
        for (std::size_t i = 0; i < t.size; ++i) {
          float total = primary[t.offset + i];
          for (auto& replica : secondaries_) total += replica->memory.template at<float>(0)[t.offset + i];
          primary[t.offset + i] = total / count;
        }
        for (auto& replica : secondaries_)
          std::memcpy(replica->memory.template at<float>(0) + t.offset, primary + t.offset, t.size * sizeof(float));
      }
    }
  }

 private:
  struct secondary {
    arena memory;
    backend::cpu::context context;
    run_state run;
    program_slot program;
  };

  void synchronize(const std::byte* primary) {
    if (!stale_) return;
    for (auto& replica : secondaries_) std::memcpy(replica->memory.data(), primary, plan0::parameter_bytes);
    stale_ = false;
  }

  // A secondary's program for batch size N, set up once per size.
  template <int N>
  step_program<Net, N, cpu>& program_of(secondary& replica) {
    using program_type = step_program<Net, N, cpu>;
    if (program_type* held = replica.program.template find<program_type>(N)) return *held;
    replica.program.reset();
    using plan = memory_plan<Net, N, 0>;
    replica.memory.reserve(plan::total_bytes, plan::activations_offset);
    replica.context.native_bf16 = backend::cpu::native_bf16_products();
    return replica.program.template emplace<program_type>(N, replica.memory.data(), plan::activations_offset,
                                                          replica.context, replica.run);
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
};

}  // namespace typeflow

// engine<Net, Policy, Strategy, cpu>: model<> on the CPU (train/engine.hpp
// lists what an engine provides).
//
// One arena (see memory_plan.hpp) holds the weights, gradients, the
// optimizer's slots and the step region; a step_program is set up for each
// batch size, and each step then runs forward, loss, backward and update
// over fixed addresses with no allocation. mirrored<N> runs replicas 1 .. N-1
// through train/cpu_replicas.hpp, and so does zero<k, mirrored<N>>, whose
// replicas each keep a shard of the optimizer's slots (the engine's arena
// then holds replica 0's shard); multi_worker adds the strategy's MPI
// collectives (a broadcast of the initial weights, the gradients' mean), and
// zero<k, multi_worker> shards across the workers through
// train/cpu_worker_shards.hpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "typeflow/backend/cpu/context.hpp"
#include "typeflow/backend/device.hpp"
#include "typeflow/core/random.hpp"
#include "typeflow/train/cpu_replicas.hpp"
#include "typeflow/train/cpu_worker_shards.hpp"
#include "typeflow/distribute/mirrored.hpp"
#include "typeflow/distribute/replica_seeds.hpp"
#include "typeflow/distribute/zero.hpp"
#include "typeflow/model/memory_plan.hpp"
#include "typeflow/precision/loss_scale.hpp"
#include "typeflow/train/arena.hpp"
#include "typeflow/train/row_weights.hpp"
#include "typeflow/train/engine.hpp"
#include "typeflow/train/generation.hpp"
#include "typeflow/train/inference_loop.hpp"
#include "typeflow/train/initialization.hpp"
#include "typeflow/train/non_finite.hpp"
#include "typeflow/train/parameter_table.hpp"
#include "typeflow/train/program_slot.hpp"
#include "typeflow/train/regularization.hpp"
#include "typeflow/train/step_program.hpp"
#include "typeflow/train/training_state.hpp"
#include "typeflow/train/training_step.hpp"

// The CPU's executors, where the engine sets up its step programs. A CUDA
// translation unit parses none of them: nvcc 13 cannot compile oneDNN's C++
// header (backend/cpu/context.hpp), and a CPU model refuses to train there.
#if !defined(__CUDACC__)
#include "typeflow/backend/cpu/executors.hpp"
#endif

namespace typeflow {

template <class Net, class Policy, class Strategy>
class engine<Net, Policy, Strategy, cpu> {
  using plan0 = memory_plan<Net, 0, 0>;
  static constexpr bool loss_scaling = Policy::loss_scaling;
  static constexpr int replica_count = Strategy::replicas;
  static constexpr int classes = training_state<Net>::classes;
  static constexpr std::size_t rows_per_sample = training_state<Net>::rows_per_sample;
  static constexpr bool has_regularizers = Net::has_regularizers;
  // zero<k, mirrored<N>>: each replica keeps a shard of the slots (k >= 1)
  // and of the mean gradient (k = 2) (distribute/zero.hpp).
  static constexpr bool sharded = is_zero_v<Strategy>;
  static constexpr bool reduce_scattered = zero_stage_v<Strategy> >= 2;
  using replicas_type = cpu_replicas<Net, Strategy>;
  // zero<k, multi_worker>: the shards are the workers'.
  static constexpr bool sharded_across_workers = sharded && Strategy::across_processes;
  using worker_shards_type =
      std::conditional_t<sharded_across_workers, cpu_worker_shards<Net, Strategy>, std::monostate>;
  // zero<2|3, mirrored<N>>: each unit's gradients reduced as backward goes;
  // zero<3> the weights sharded too, each unit's gathered for it.
  static constexpr bool reduces_per_unit = replicas_type::reduces_per_unit;
  static constexpr bool gathers = replicas_type::gathers;
  // zero<2|3, multi_worker>: the same across processes (train/cpu_worker_shards.hpp).
  static constexpr bool worker_reduces_per_unit = sharded_across_workers && zero_stage_v<Strategy> >= 2;
  static constexpr bool worker_gathers = sharded_across_workers && zero_stage_v<Strategy> >= 3;

 public:
  engine(training_state<Net>& training, std::uint64_t seed)
      : training_(training), replicas_(seed), worker_shards_(make_worker_shards(strategy_)) {
    memory_.reserve(plan0::gradients_offset, 0);
    initialize_parameters<Net>(memory_.data(), seed);
    strategy_.broadcast(memory_.template at<float>(0), Net::parameter_floats);  // every worker starts alike
    seed_ = seed;
    run_.seed = worker_seed(seed);
    context_.weight_copies.kept = true;  // versioned here: writable_parameters() and every update
    if constexpr (reduces_per_unit) run_.hooks = replicas_.hooks_of_primary();  // its combinators' children are units
    if constexpr (worker_reduces_per_unit) run_.hooks = worker_shards_.hooks();
  }
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  bool is_chief() const { return strategy_.is_chief(); }
  const Strategy& strategy() const { return strategy_; }
  const arena& memory() const { return memory_; }
  const precision::weight_copies& weight_copies() const { return context_.weight_copies; }
  // Replica r's arena in bytes (replica 0 is this engine's own).
  std::size_t arena_bytes(int r = 0) const {
    if (r < 0 || r >= replica_count)
      throw std::out_of_range("arena_bytes: replica " + std::to_string(r) + " of " + std::to_string(replica_count));
    return r == 0 ? memory_.size() : replicas_.arena_bytes(r);
  }
  // Replica r's weights, gradients and optimizer slots: the bytes held in
  // memory now (whole pages), and under zero<2|3> the most seen during the
  // steps since track_state_peaks(true) (otherwise they do not change
  // within a step: the bytes now).
  std::size_t resident_state_bytes(int r = 0) const {
    if (r < 0 || r >= replica_count)
      throw std::out_of_range("resident_state_bytes: replica " + std::to_string(r) + " of " +
                              std::to_string(replica_count));
    if constexpr (replica_count > 1)
      if (r != 0) return replicas_.resident_state_bytes(r, memory_);
    if constexpr (worker_reduces_per_unit) return memory_.resident_bytes(0, step_base()) + worker_shards_.window_bytes();
    return memory_.resident_bytes(0, step_base());
  }
  void track_state_peaks(bool on) {
    if constexpr (reduces_per_unit) replicas_.track_peaks(on);
    if constexpr (worker_reduces_per_unit) worker_shards_.track_peaks(on, step_base());
  }
  std::size_t peak_state_bytes(int r = 0) const {
    if constexpr (worker_reduces_per_unit) {
      if (r != 0) throw std::out_of_range("peak_state_bytes: replica " + std::to_string(r) + " of 1");
      return worker_shards_.peak();
    }
    if constexpr (reduces_per_unit) {
      if (r < 0 || r >= replica_count)
        throw std::out_of_range("peak_state_bytes: replica " + std::to_string(r) + " of " +
                                std::to_string(replica_count));
      return replicas_.peak_state_bytes(r);
    }
    return resident_state_bytes(r);
  }

  template <class Optimizer, class Loss>
  void check_compile(const Optimizer&, const Loss&) const {
    // use_ema under zero<k>: the average is one more sharded slot.
    if constexpr (sharded)
      static_assert(optimizers::updates_in_shards<Optimizer>(),
                    "zero<k>: the optimizer must update in shards: sgd, adam, adamw, lion, rmsprop, an optimizer of "
                    "one's own with a rule(), or accumulate<K> of one (a custom update() sees the whole region)");
  }
  // compile(optimizer, on_output<"name">(loss, weight)..., ...): the CPU runs
  // each output's loss through output_losses itself.
  template <class Optimizer, class... Arguments>
  void check_compile_outputs(const Optimizer& optimizer, const Arguments&...) const {
    check_compile(optimizer, 0);
  }

  // Fresh optimizer state for training_'s optimizer; the weights stay.
  template <class Optimizer>
  void compiled(const Optimizer&) {
    program_.reset();
    context_.weight_copies.clear();
    memory_.reserve(step_base(), plan0::gradients_offset);
    if constexpr (reduces_per_unit || worker_reduces_per_unit) {  // zero<2|3>: the gradients' pages given back (zero), the slots' zeroed
      memory_.release(plan0::gradients_offset, plan0::trainable_bytes);
      std::memset(memory_.data() + plan0::slots_offset, 0, step_base() - plan0::slots_offset);
    } else {
      std::memset(memory_.data() + plan0::gradients_offset, 0, step_base() - plan0::gradients_offset);
    }
    if constexpr (sharded) shard_owners().compiled(training_.slots);
  }

  // The CPU's part of a training step (train/training_step.hpp): the launch
  // runs at once, every replica in its own thread (mirrored<N>, zero<k>);
  // batch k is still in place then (the loop reads batch k + 1 only after
  // launch(k)).
  template <class Batch>
  struct step_ops {
    using batch_type = Batch;
    static constexpr int shard = shard_of<Strategy, Batch::size>();
    using program_type = step_program<Net, shard, cpu>;
    static constexpr std::size_t features_per_shard = shard * Batch::features_type::size;
    static constexpr std::size_t labels_per_shard = shard * Batch::label_type::size;

    // One replica's share of the launch, on its own program and dropout stream.
    struct replica {
      step_ops& ops;
      int r;
      program_type& program;
      run_state& run;
      void forward() {
        std::memcpy(program.input(), ops.staged->features.data() + r * features_per_shard,
                    features_per_shard * sizeof(ops.staged->features.data()[0]));
        run.training = true;
        run.valid_samples = replica_valid(ops.staged->valid, r, shard);
        ++run.step;
        if constexpr (gathers)
          ops.e.replicas_.forward_sharded(r, program, ops.e.memory_);
        else if constexpr (worker_gathers)
          ops.e.worker_shards_.forward_sharded(program, ops.e.memory_);
        else
          program.forward();
      }
      // A partial batch: the loss over this replica's valid rows, and under
      // mirrored<N> its gradient weighed by its share of the batch's samples.
      void loss() {
        const int valid = ops.staged->valid, own = replica_valid(valid, r, shard);
        const auto& weights = ops.staged->sample_weights;
        ops.losses[r] = ops.e.compute_loss(program, ops.staged->labels.data() + r * labels_per_shard, own, true,
                                           weights.empty() ? nullptr : weights.data() + r * shard);
        if (replica_count > 1 && valid < Batch::size && own > 0) {
          const float weight = static_cast<float>(replica_count * own) / static_cast<float>(valid);
          float* gradient = program.output_gradient();
          constexpr std::size_t count = shard * Net::output_shape_type::size;
          for (std::size_t i = 0; i < count; ++i) gradient[i] *= weight;
        }
      }
      void scale_output_gradient() { ops.e.scale_output_gradient(program); }
    };

    engine& e;
    // The batch of the step under way, and those staged by parity: batch
    // k + 1 is staged before step k finishes, and its metrics read batch k's labels.
    const Batch* staged = nullptr;
    const Batch* staged_at[2] = {};
    program_type* programs[replica_count] = {};
    double losses[replica_count] = {};
    step_outcome result{};

    void check(const Batch&) const {}  // the embedding checks its ids itself
    void stage(const Batch& batch, int parity) { staged_at[parity] = &batch; }
    void begin(int parity, int) {
      staged = staged_at[parity];
      programs[0] = &e.template program_for<shard>();  // first: setting it up may move the arena
      if constexpr (replica_count > 1) e.replicas_.programs_for(e.memory_, programs);
    }
    template <class Body>
    void record(int, Body&& body) {
      body();
    }
    template <class F>
    void each_replica(int, F&& f) {
      auto job = [&](int r) {
        replica share{*this, r, *programs[r], r == 0 ? e.run_ : e.replicas_.run_of(r)};
        f(share);
      };
      if constexpr (replica_count > 1)
        e.replicas_.each(job);
      else
        job(0);
    }
    // Each replica's backward, then the mean of their gradients (under
    // zero<2> each replica's shard of it), and across processes
    // (multi_worker) the mean over the workers.
    void backward_and_all_reduce() {
      if constexpr (reduces_per_unit) {  // each unit's gradients reduced as its backward ends
        e.replicas_.begin_backward();
        auto job = [&](int r) { e.replicas_.backward_sharded(r, *programs[r], e.memory_); };
        e.replicas_.each(job);
      } else if constexpr (worker_reduces_per_unit) {  // the same across processes, each worker one replica
        e.worker_shards_.backward_sharded(*programs[0], e.memory_);
      } else if constexpr (replica_count > 1) {
        auto job = [&](int r) { programs[r]->backward(); };
        e.replicas_.each(job);
        e.replicas_.reduce_gradients(e.memory_.data());
      } else {
        programs[0]->backward();
      }
      if constexpr (sharded_across_workers)
        e.worker_shards_.reduce_gradients(e.memory_.data());
      else if constexpr (!sharded)
        e.strategy_.all_reduce_mean(e.memory_.template at<float>(plan0::gradients_offset), Net::trainable_floats);
    }
    void update() {
      double loss = 0;
      const int valid = staged->valid;
      if (valid == Batch::size) {
        for (double l : losses) loss += l / replica_count;
      } else {  // a partial batch: each replica's mean weighed by its valid samples
        for (int r = 0; r < replica_count; ++r)
          loss += losses[r] * replica_valid(valid, r, shard) / static_cast<double>(valid);
      }
      if constexpr (replica_count > 1 && Strategy::sync_statistics) {
        std::array<float, replica_count> weights{};
        for (int r = 0; r < replica_count; ++r)
          weights[static_cast<std::size_t>(r)] = static_cast<float>(replica_valid(valid, r, shard)) / static_cast<float>(valid);
        e.replicas_.weigh_statistics(valid == Batch::size ? std::span<const float>{} : std::span<const float>(weights));
      }
      result = e.update_step(loss);
    }
    step_outcome outcome(int) const { return result; }
    const float* outputs(int r, int) const { return programs[r]->output(); }
    const typename Batch::label_value* labels(int r, int parity) const {
      return staged_at[parity]->labels.data() + r * labels_per_shard;
    }
    static std::optional<double> metric_hits(int, int, std::size_t) { return std::nullopt; }  // they read the outputs
  };
  template <class Batch>
  training_steps<Net, loss_scaling, step_ops<Batch>> steps() {
    return {training_, step_ops<Batch>{*this}};
  }

  // The loss and metrics over every sample of `data`, in inference mode.
  template <class Data>
  void evaluate(const Data& data, std::span<callback* const> callbacks = {}) {
    constexpr int N = Data::element_type::size;
    if constexpr (worker_gathers) worker_shards_.make_whole(memory_);  // every worker, whatever its data holds
    inference_pass<N> pass{*this, program_for<N>()};
    const double penalty = has_regularizers ? regularization_penalty() : 0.0;
    evaluation_loop<Net>(training_, data, pass, penalty, callbacks);
  }

  // The outputs for every sample of `data`, in inference mode.
  template <class Data>
  std::vector<float> predict(const Data& data, std::span<callback* const> callbacks = {}) {
    constexpr int N = Data::element_type::size;
    if constexpr (worker_gathers) worker_shards_.make_whole(memory_);
    return predict_loop<Net>(data, inference_pass<N>{*this, program_for<N>()}, callbacks);
  }

  std::vector<std::int32_t> generate(std::span<const std::int32_t> prompt, int n, generate_options options) {
    make_whole();
    return generate_tokens<Net::input_shape_type::template dim<0>, classes>(decoder_program(), run_, prompt, n, options);
  }

  // Under zero<3> replica 0's weights are gathered whole first (and freed
  // again when the next step begins).
  std::span<const float> parameters() const {
    const_cast<engine*>(this)->make_whole();
    return {memory_.template at<float>(0), Net::parameter_floats};
  }
  // Replica 0's parameter region as it is, gathering nothing: under zero<3>
  // its shard of the trainable floats, its statistics and the rest whole,
  // its other trainable floats stale (a zero<3> checkpoint's
  // state.safetensors reads it so).
  std::span<const float> local_parameters() const { return {memory_.template at<float>(0), Net::parameter_floats}; }
  // zero<3>: shard i of the trainable weights as the replica (this worker)
  // that holds it has them, gathering nothing; replica 0's own where it
  // holds them all (gathered whole, or changed from outside since a step).
  std::span<const float> weight_shard(int i) const
    requires sharded
  {
    const std::vector<std::size_t> cut = shard_cut();
    const auto index = static_cast<std::size_t>(i);
    std::span<const float> region = local_parameters();
    if constexpr (gathers)
      if (i != 0 && !replicas_.primary_holds_all()) region = replicas_.parameter_region(i);
    return region.subspan(cut[index], cut[index + 1] - cut[index]);
  }
  // For writing (load_weights, parameter()): the replicas take it before the next step.
  std::span<float> writable_parameters() {
    make_whole();
    replicas_.mark_stale();
    context_.weight_copies.weights_changed();
    return {memory_.template at<float>(0), Net::parameter_floats};
  }
  // The last step's mean gradient (under zero<2> gathered from the shards'
  // owners: across workers a collective, which every worker calls).
  std::span<const float> gradients() const {
    if constexpr (reduce_scattered) {
      gathered_.resize(Net::trainable_floats);
      shard_owners().gather_gradients(memory_.data(), gathered_.data());
      return gathered_;
    }
    return {memory_.template at<float>(plan0::gradients_offset), Net::trainable_floats};
  }
  // Replica r's copy of the parameter region (mirrored<N>; replica 0 is the
  // engine's own). Under zero<3> replica r >= 1 holds its shard of the
  // trainable weights (and the statistics and frozen weights); the rest reads zero.
  std::span<const float> replica_parameter_region(int r) const {
    if (r < 0 || r >= replica_count)
      throw std::out_of_range("replica_parameter_region: replica " + std::to_string(r) + " of " +
                              std::to_string(replica_count));
    if constexpr (replica_count > 1)
      if (r != 0) return replicas_.parameter_region(r);
    return parameters();
  }

  // Loss scaling (mixed_float16): Keras's LossScaleOptimizer, dynamic or fixed.
  template <class Options>
  void set_loss_scale(Options options) {
    loss_scale_ = precision::loss_scale(options);
  }
  float loss_scale() const { return loss_scaling ? loss_scale_.scale() : 1.f; }
  std::int64_t skipped_steps() const { return loss_scaling ? loss_scale_.skipped_steps() : 0; }

  engine_counters counters() const { return {seed_, run_.step, loss_scale_.state()}; }
  void restore(const engine_counters& saved) {
    seed_ = saved.seed;
    run_.seed = worker_seed(saved.seed);
    run_.step = saved.dropout_step;
    loss_scale_.restore(saved.loss_scale);
    replicas_.restore_runs(saved.seed, saved.dropout_step);
  }
  // Optimizer slot s's region (after compile), for the EMA; none under
  // zero<k>, whose replicas each hold a shard of it (slot_values gathers).
  std::span<float> slot_region(int s) {
    if constexpr (sharded)
      throw std::logic_error("slot_region: under " + Strategy::name() + " each replica holds a shard of slot " +
                             std::to_string(s) + "; slot_values() gathers it");
    return {memory_.template at<float>(plan0::slot_offset(s)), Net::trainable_floats};
  }
  // Slot s's values as one unsharded region, for a checkpoint (under zero<k>
  // gathered from the replicas: the same tensor mirrored<N> writes; across
  // workers a collective, which every worker calls), and back.
  std::span<const float> slot_values(int s) {
    if constexpr (sharded) {
      // One buffer per slot: a checkpoint holds every slot's span at once.
      if (gathered_slots_.size() < static_cast<std::size_t>(s) + 1) gathered_slots_.resize(static_cast<std::size_t>(s) + 1);
      std::vector<float>& gathered = gathered_slots_[static_cast<std::size_t>(s)];
      gathered.resize(Net::trainable_floats);
      shard_owners().gather_slot(s, memory_.data(), gathered.data());
      return gathered;
    }
    return slot_region(s);
  }
  // zero<k, multi_worker>: `work` here, and whether it succeeded on every
  // worker (cpu_worker_shards::all_or_none).
  template <class Work>
  void all_or_none(const std::string& step, Work&& work) const
    requires sharded_across_workers
  {
    worker_shards_.all_or_none(step, std::forward<Work>(work));
  }
  // zero<k>: the cut of the trainable region into shards (count + 1
  // bounds), the shards this process holds (every replica's under
  // mirrored<N>, its own across workers) and shard i's part of slot s: what
  // a sharded checkpoint writes and loads, rank by rank.
  std::vector<std::size_t> shard_cut() const
    requires sharded
  {
    return shard_owners().shard_cut();
  }
  std::vector<int> held_shards() const
    requires sharded
  {
    return shard_owners().held_shards();
  }
  std::span<float> slot_shard(int i, int s)
    requires sharded
  {
    return shard_owners().slot_shard_floats(i, s, memory_.data());
  }
  void set_slot_values(int s, std::span<const float> values) {
    if (values.size() != Net::trainable_floats)
      throw std::invalid_argument("set_slot_values: " + std::to_string(values.size()) + " floats for a slot of " +
                                  std::to_string(Net::trainable_floats));
    if constexpr (sharded) {
      shard_owners().scatter_slot(s, memory_.data(), values.data());
    } else {
      const std::span<float> into = slot_region(s);
      std::copy(values.begin(), values.end(), into.begin());
    }
  }

 private:
  // The dropout seed of this process's replica 0: multi_worker's other
  // workers draw their own masks.
  std::uint64_t worker_seed(std::uint64_t seed) const {
    return distribute::worker_seed(seed, strategy_.rank());
  }

  // After the slots: whole on replica 0, or its shard of each under zero<k>.
  std::size_t step_base() const {
    std::size_t slot_stride = replicas_type::slot_stride;
    if constexpr (sharded_across_workers) slot_stride = worker_shards_.slot_stride();
    return plan0::slots_offset + static_cast<std::size_t>(training_.slots) * slot_stride;
  }

  // zero<k>'s shards and their owners: the replicas here, or the workers.
  static worker_shards_type make_worker_shards(const Strategy& strategy) {
    if constexpr (sharded_across_workers)
      return worker_shards_type(strategy.inner);
    else
      return {};
  }
  auto& shard_owners() {
    if constexpr (sharded_across_workers)
      return worker_shards_;
    else
      return replicas_;
  }
  const auto& shard_owners() const {
    if constexpr (sharded_across_workers)
      return worker_shards_;
    else
      return replicas_;
  }

  // Sets the arena and the step program up for batch size N, once per size.
  template <int N>
  step_program<Net, N, cpu>& program_for() {
#if !TYPEFLOW_HAS_ONEDNN_CPP
    static_assert(N < 0, "model<Net, Policy, Strategy, cpu> cannot train or predict in a CUDA translation unit: "
                         "nvcc 13 cannot compile oneDNN's C++ header under C++20 (backend/cpu/context.hpp). "
                         "Run CPU models from a .cpp file, or use model<Net, Policy, single_device, cuda>");
#endif
    return program_in<Net, N>(N);
  }
  // The decoder's program (batch 1) in the step region; a later fit or
  // evaluate sets its own program up again.
  step_program<typename Net::decoder, 1, cpu>& decoder_program() {
    constexpr int decoder_marker = -1;
    // zero<3>: the decoder reads replica 0's weights whole (generate gathers
    // them), so its combinators get no hooks.
    const parameter_hooks* hooks = std::exchange(run_.hooks, nullptr);
    auto& program = program_in<typename Net::decoder, 1>(decoder_marker);
    run_.hooks = hooks;
    return program;
  }
  // zero<3>: the weights gathered whole (across workers a collective),
  // freed again when the next step begins.
  void make_whole() {
    if constexpr (gathers) replicas_.make_whole(memory_);
    if constexpr (worker_gathers) worker_shards_.make_whole(memory_);
  }
  // The regularizers' penalty on the weights (zero<3>: summed from the shards' owners).
  double regularization_penalty() {
    if constexpr (gathers)
      return replicas_.regularization_penalty(memory_.data());
    else if constexpr (worker_gathers)
      return worker_shards_.regularization_penalty(memory_.data());
    else
      return apply_regularizers<Net>(memory_.data(), false);
  }
  template <class Program_net, int N>
  step_program<Program_net, N, cpu>& program_in(int marker) {
    auto prepare_arena = [this](std::size_t bytes, std::size_t keep) {
      context_.weight_copies.clear();  // the new program's layers register theirs
      context_.native_bf16 = backend::cpu::native_bf16_products();
      memory_.reserve(bytes, keep);
      return memory_.data();
    };
    return program_.template set_up<step_program<Program_net, N, cpu>>(marker, step_base(), prepare_arena, context_,
                                                                       run_);
  }

  // The update on replica 0's (all-reduced) gradients: the NaN policy's
  // verdict, the loss scale's unscaling, the regularizers, the optimizer.
  // `loss` is the step's mean loss. A refused step changes no weight.
  step_outcome update_step(double loss) {
    step_outcome outcome{loss, 0.0, false, training_.iterations};
    float* weights = memory_.template at<float>(0);
    float* grads = memory_.template at<float>(plan0::gradients_offset);
    // The NaN policy (train/non_finite.hpp): after the all-reduce, so that
    // every worker stops at the same step; before the update, so that the
    // weights stay the last good step's (training_steps::finish throws).
    if constexpr (!loss_scaling) {
      bool loss_finite = std::isfinite(loss);
      // Across processes each worker's loss is its own shard's: one verdict for all.
      if constexpr (sharded_across_workers)
        loss_finite = worker_shards_.on_every_worker(loss_finite);
      else if constexpr (Strategy::across_processes)
        loss_finite = distribute::in_every_process(strategy_, loss_finite, "the loss's non-finite verdict");
      if (!loss_finite) {
        outcome.loss_refused_elsewhere = std::isfinite(loss);  // every worker's fit stops alike
        return outcome;
      }
      // The optimizer's own pass checks the gradients where it can
      // (update.hpp); under zero<k> every shard is checked before any updates.
      if constexpr (reduce_scattered) {
        outcome.gradients_refused = !shard_owners().all_updatable(memory_.data());
      } else if (sharded || !training_.optimizer->checks_non_finite()) {
        outcome.gradients_refused = !all_updatable_parallel(grads, Net::trainable_floats);
      }
      if (outcome.gradients_refused) return outcome;
    }
    // mixed_float16: the gradients of the scaled loss, unscaled; a step with
    // an inf or a NaN among them changes no weight (after the all-reduce,
    // every replica and worker sees the same verdict; under zero<2> the
    // verdict is taken over every replica's shard).
    if constexpr (loss_scaling) {
      const float scale = loss_scale_.scale();
      bool finite;
      if constexpr (reduce_scattered)
        finite = shard_owners().unscale_all_finite(memory_.data(), scale);
      else
        finite = precision::unscale_all_finite(grads, Net::trainable_floats, scale);
      if (!loss_scale_.after_step(finite)) {
        if constexpr (has_regularizers) outcome.penalty = regularization_penalty();
        return outcome;
      }
    }
    if constexpr (has_regularizers) {
      if constexpr (reduce_scattered)
        outcome.penalty = shard_owners().apply_regularizers_to_shards(memory_.data());
      else
        outcome.penalty = apply_regularizers<Net>(memory_.data(), true);
    }
    if constexpr (sharded) {
      // Each replica updates its shard with its slots, then the all-gather.
      if (training_.optimizer->update_shards(shard_owners().sharded_update(memory_.data(), training_.iterations + 1))) {
        ++outcome.iterations;
        context_.weight_copies.after_update(false, weights + Net::trainable_floats, weights + Net::parameter_floats);
        shard_owners().after_update(weights);
      }
      return outcome;
    }
    optimizers::update_arguments arguments;
    arguments.weights = weights;
    arguments.grads = grads;
    float* slot_pointers[training_state<Net>::max_slots] = {};
    for (int s = 0; s < training_.slots; ++s) slot_pointers[s] = memory_.template at<float>(plan0::slot_offset(s));
    arguments.slots = slot_pointers;
    arguments.floats = static_cast<std::ptrdiff_t>(Net::trainable_floats);  // frozen layers' lie beyond
    arguments.tensors = parameter_table<Net>::tensors();
    arguments.iteration = training_.iterations + 1;
    int non_finite = 0;
    if constexpr (!loss_scaling) arguments.non_finite = &non_finite;
    const bool write_copies = training_.optimizer->writes_weight_copies() && !context_.weight_copies.entries().empty();
    if (write_copies) arguments.tensor_copies = weight_copy_table(weights);
    const bool updated = training_.optimizer->update(arguments);
    if (non_finite) {  // nothing was changed
      outcome.gradients_refused = true;
      return outcome;
    }
    if (updated) {
      ++outcome.iterations;
      context_.weight_copies.after_update(write_copies, weights + Net::trainable_floats, weights + Net::parameter_floats);
      if constexpr (replica_count > 1) replicas_.after_update(weights);
    }
    return outcome;
  }

  // The optimizer's table of the bf16 weight copies it writes, parallel to
  // the parameter tensors (nullptr: none), built again when a new program
  // has registered its layers' copies. A copy qualifies when it lives from
  // step to step and covers a whole trainable tensor (its tail, if longer,
  // is the row padding after it, which no update changes).
  bf16* const* weight_copy_table(const float* weights) {
    precision::weight_copies& copies = context_.weight_copies;
    const auto& tensors = parameter_table<Net>::tensors();
    if (copy_table_generation_ != copies.generation() || copy_table_.size() != tensors.size()) {
      copy_table_.assign(tensors.size(), nullptr);
      for (precision::weight_copy& c : copies.entries()) {
        c.optimizer_writes = false;
        if (!c.persistent) continue;
        for (std::size_t t = 0; t < tensors.size() && !c.optimizer_writes; ++t) {
          if (copy_table_[t] || weights + tensors[t].offset != c.source || c.count < tensors[t].size) continue;
          copy_table_[t] = c.copy;
          c.optimizer_writes = true;
        }
      }
      copy_table_generation_ = copies.generation();
    }
    return copy_table_.data();
  }

  // The mean loss over the program's first `valid` samples; writes
  // d(loss)/d(output). labels: the program's batch of labels; training: a
  // step's loss, which fit's class_weight weighs; sample_weights: the
  // program's samples' weights, or nullptr (train/row_weights.hpp).
  template <class Program, class Label>
  double compute_loss(Program& program, const Label* labels, int valid, bool training,
                      const float* sample_weights = nullptr) {
    const std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(Program::batch_size * rows_per_sample);
    const std::ptrdiff_t valid_rows = static_cast<std::ptrdiff_t>(valid * rows_per_sample);
    float* row_loss = program.row_losses();
    if constexpr (std::is_same_v<Label, std::int32_t>)
      training_.loss->sparse(program.output(), labels, rows, classes, valid_rows, program.output_gradient(), row_loss);
    else
      training_.loss->dense(program.output(), labels, rows, classes, valid_rows, program.output_gradient(), row_loss);
    if (training && !training_.class_weights.empty())  // fit's class_weight (train/row_weights.hpp)
      weight_rows_by_class(training_.class_weights, labels, valid_rows, classes, row_loss, program.output_gradient());
    if (sample_weights)
      weight_rows_by_sample(sample_weights, valid_rows, rows_per_sample, classes, row_loss, program.output_gradient());
    double sum = 0;
    for (std::ptrdiff_t r = 0; r < valid_rows; ++r) sum += row_loss[r];
    return valid_rows > 0 ? sum / static_cast<double>(valid_rows) : 0.0;
  }

  // mixed_float16: d(loss)/d(output) times the loss scale, before backward.
  template <class Program>
  void scale_output_gradient(Program& program) {
    if constexpr (loss_scaling) {
      const float scale = loss_scale_.scale();
      float* gradient = program.output_gradient();
      constexpr std::size_t count = Program::batch_size * Net::output_shape_type::size;
#pragma omp simd
      for (std::size_t i = 0; i < count; ++i) gradient[i] *= scale;
    }
  }

  // predict's and evaluate's view of the program for batch size N
  // (train/inference_loop.hpp).
  template <int N>
  struct inference_pass {
    engine& e;
    step_program<Net, N, cpu>& program;
    template <class Batch>
    void forward(const Batch& batch) {
      std::memcpy(program.input(), batch.features.data(), batch.features.size() * sizeof(batch.features.data()[0]));
      e.run_.training = false;
      if constexpr (gathers) {
        e.replicas_.begin_inference(e.memory_);
        e.replicas_.forward_sharded(0, program, e.memory_);
      } else {
        program.forward();
      }
    }
    void append_outputs(std::vector<float>& to, std::size_t count) const {
      to.insert(to.end(), program.output(), program.output() + count);
    }
    template <class Batch>
    double loss(const Batch& batch) {
      return e.compute_loss(program, batch.labels.data(), batch.valid, false,
                            batch.sample_weights.empty() ? nullptr : batch.sample_weights.data());
    }
    const float* outputs() const { return program.output(); }
    static std::optional<double> metric_hits(std::size_t) { return std::nullopt; }  // the metrics read the outputs
  };

  [[no_unique_address]] Strategy strategy_{};  // declared first: multi_worker starts MPI before anything else
  training_state<Net>& training_;              // the model's: optimizer, loss, metrics, counters, means
  arena memory_;
  backend::cpu::context context_;
  run_state run_;
  std::uint64_t seed_ = 0;  // the model's
  precision::loss_scale loss_scale_{precision::dynamic_loss_scale{}};  // used under mixed_float16 only
  program_slot program_;
  std::vector<bf16*> copy_table_;  // weight_copy_table()'s, for copies of this generation
  std::uint64_t copy_table_generation_ = ~std::uint64_t{0};
  replicas_type replicas_;  // mirrored<N>: replicas 1 .. N-1 and their threads
  worker_shards_type worker_shards_;  // zero<k, multi_worker>: this worker's shard
  mutable std::vector<float> gathered_;             // zero<2>: the mean gradient, gathered (not during steps)
  std::vector<std::vector<float>> gathered_slots_;  // zero<k>: each slot, gathered for a checkpoint
};

}  // namespace typeflow

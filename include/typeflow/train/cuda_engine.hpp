// engine<Net, Policy, Strategy, cuda>: model<> on NVIDIA GPUs
// (train/engine.hpp lists what an engine provides): single_device, mirrored<N>
// on N GPUs of one process, or multi_worker with one GPU per process (NCCL).
//
// The weights, gradients, optimizer slots and activations live in one
// cudaMalloc arena laid out by the same compile-time memory plan as on the
// CPU (so the parameter region is the same bytes on both devices). A host
// copy of the parameter region beside it is initialised as the CPU's (the
// same seed gives the same weights on both devices) and is what model<>'s
// weights files and parameter views read; the two move only when one side
// changed.
//
// One training step is captured once per batch size as a CUDA graph and
// replayed: the batch's copy into the input, forward, the loss,
// backward, the optimizer (one statistics pass, one update kernel), the
// mean loss reduced on the device, and the copies of it (and of the outputs,
// only when a metric reads them) back to pinned memory. The next
// batch's host-to-device copy runs on a second stream while a step computes.
//
// mirrored<N>: replica r lives on device r with its own arena, weights and
// optimizer state, and takes B / N consecutive samples; the backward
// interleaved with NCCL's all-reduce, and multi_worker's communicator, are
// distribute/cuda_replicas.hpp's.
//
// zero<1|2, mirrored<N> | multi_worker>: each replica's arena keeps one
// shard of every optimizer slot (the longest shard's floats a slot, so the
// step region starts lower), its device optimizer updates that shard, and
// the step ends with the weights' all-gather (cuda_replicas.hpp).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "typeflow/backend/cuda/layers.hpp"
#include "typeflow/backend/cuda/losses.hpp"
#include "typeflow/backend/cuda/metric_hits.hpp"
#include "typeflow/backend/cuda/device_optimizer.hpp"
#include "typeflow/backend/cuda/regularization.hpp"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/backend/device.hpp"
#include "typeflow/distribute/cuda_replicas.hpp"
#include "typeflow/distribute/mirrored.hpp"
#include "typeflow/distribute/replica_seeds.hpp"
#include "typeflow/layers/merge_functors.hpp"
#include "typeflow/train/arena.hpp"
#include "typeflow/train/cuda_output_losses.hpp"
#include "typeflow/train/cuda_replica.hpp"
#include "typeflow/train/engine.hpp"
#include "typeflow/train/generation.hpp"
#include "typeflow/train/inference_loop.hpp"
#include "typeflow/train/initialization.hpp"
#include "typeflow/train/non_finite.hpp"
#include "typeflow/train/parameter_table.hpp"
#include "typeflow/train/regularization.hpp"
#include "typeflow/train/row_weights.hpp"
#include "typeflow/train/step_program.hpp"
#include "typeflow/train/training_state.hpp"
#include "typeflow/train/training_step.hpp"

namespace typeflow {

template <class Net, class Policy, class Strategy>
class engine<Net, Policy, Strategy, cuda> {
  using replication = cuda_replicas<Net, Strategy>;
  static constexpr bool across_processes = replication::across_processes;
  using plan0 = memory_plan<Net, 0, 0>;
  template <int N>
  using program_type = step_program<Net, N, cuda>;
  // model::generate's: the network bound for one position of one sample.
  using decoder_type = step_program<typename Net::decoder, 1, cuda>;
  using step_state = optimizers::device::step_state;
  static constexpr bool loss_scaling = Policy::loss_scaling;
  using output_shape_type = typename Net::output_shape_type;
  static constexpr int classes = training_state<Net>::classes;
  // Floats between the output's rows on the device (and its gradient's):
  // classes, or the padded vocabulary of a tied_logits head.
  static constexpr int row_stride = training_state<Net>::row_stride;
  static constexpr bool packed_outputs = network_io<Net>::packed_outputs;  // several outputs, a loss each
  static constexpr std::size_t rows_per_sample = training_state<Net>::rows_per_sample;
  static constexpr int replica_count = Strategy::replicas;
  static constexpr bool has_regularizers = Net::has_regularizers;
  static constexpr bool sharded = is_zero_v<Strategy>;  // zero<k>: each replica holds a shard of the slots
  using replica = cuda_replica<Net>;  // one device and everything on it
  using decoder_view = cuda_decoder_view<Net>;
  template <class>
  friend struct cuda_replica;  // it lays out its programs against the engine's arena and weights

 public:
  // Replica r runs on device first_device + r.
  // multi_worker: each process takes its local rank's device (first_device is not used).
  engine(training_state<Net>& training, std::uint64_t seed, int first_device = 0) : training_(training), seed_(seed) {
    if (first_device < 0)
      throw std::invalid_argument("model<..., cuda>: device " + std::to_string(first_device) + " is negative");
    host_.reserve(plan0::parameter_bytes, 0);
    initialize_parameters<Net>(host_.data(), seed);
    first_device = replication_.first_device(first_device);
    seed = replication_.worker_seed(seed);  // each worker draws its own dropout masks, as on the CPU
    backend::cuda::require_devices(first_device + replica_count, replica_count > 1 ? "mirrored<N> on tf::cuda"
                                                                                   : "model<Net, Policy, Strategy, cuda>");
    for (int r = 0; r < replica_count; ++r) {
      replicas_.push_back(std::make_unique<replica>(first_device + r, replica_seed(seed, r)));
      *replicas_.back()->state_mirror() = initial_state_;
    }
    replication_.connect(first_device);
  }
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  bool is_chief() const { return replication_.is_chief(); }
  const Strategy& strategy() const { return strategy_; }
  int device(int r) const { return replicas_.at(static_cast<std::size_t>(r))->device; }
  // Replica r's device arena in bytes (0 before the first step).
  std::size_t arena_bytes(int r = 0) const {
    if (r < 0 || r >= static_cast<int>(replicas_.size()))
      throw std::out_of_range("arena_bytes: replica " + std::to_string(r) + " of " + std::to_string(replicas_.size()));
    return replicas_[static_cast<std::size_t>(r)]->arena.size();
  }

  // Refuses what the GPU cannot run; the loss's executor on the device
  // (backend/cuda/losses.hpp) takes over at compiled(). A network with
  // several outputs given one loss has it on every output, as on the CPU.
  template <class Optimizer, class Loss>
  void check_compile(const Optimizer&, const Loss& loss) {
    static_assert(backend::cuda::has_device_loss<Loss>,
                  "compile on tf::cuda: this loss has no executor on the GPU (backend/cuda/losses.hpp lists those "
                  "that have: sparse_categorical_crossentropy and device_row_losses' dense-target losses)");
    static_assert(!Net::loss_gradient_in_place || std::is_same_v<Loss, losses::sparse_categorical_crossentropy>,
                  "compile on tf::cuda: a tied_logits head stores its rows padded to a multiple of 64 columns and "
                  "takes d_logits over the logits (layers/embedding.hpp); its loss is "
                  "sparse_categorical_crossentropy, which reads class ids");
    if constexpr (Net::bf16_logits && std::is_same_v<Loss, losses::sparse_categorical_crossentropy>)
      if (!loss.from_logits)
        throw std::invalid_argument("compile on tf::cuda: the network's head stores bf16 logits under a bfloat16 "
                                    "policy (layers/embedding.hpp), which the loss reads as logits: "
                                    "sparse_categorical_crossentropy{.from_logits = true}");
    if constexpr (backend::cuda::has_device_loss<Loss>) {
      if constexpr (packed_outputs) {
        std::vector<std::unique_ptr<backend::cuda::device_loss_base>> each;
        for (std::size_t k = 0; k < network_io<Net>::output_count; ++k) each.push_back(backend::cuda::make_device_loss(loss));
        next_loss_ = std::make_unique<cuda_output_losses>(std::move(each));
      } else {
        next_loss_ = backend::cuda::make_device_loss(loss);
      }
    }
    download_weights();
  }
  // compile(optimizer, on_output<"name">(loss, weight)..., metrics...) on a
  // network with several outputs: each loss's executor, in the arguments'
  // order (train/cuda_output_losses.hpp).
  template <class Optimizer, class... Arguments>
  void check_compile_outputs(const Optimizer&, const Arguments&... arguments) {
    std::vector<std::unique_ptr<backend::cuda::device_loss_base>> each;
    const auto add = [&]<class A>(const A& argument) {
      if constexpr (is_on_output_v<A>) {
        using V = typename A::value_type;
        if constexpr (losses::loss<V>) {
          static_assert(backend::cuda::has_device_loss<V>,
                        "compile on tf::cuda: an output's loss has no executor on the GPU (backend/cuda/losses.hpp "
                        "lists those that have)");
          if constexpr (backend::cuda::has_device_loss<V>) each.push_back(backend::cuda::make_device_loss(argument.value));
        }
      }
    };
    (add(arguments), ...);
    next_loss_ = std::make_unique<cuda_output_losses>(std::move(each));
    download_weights();
  }

  // Each replica's optimizer on its device, with fresh state; the arena is
  // laid out again (the weights come from the host copy). `optimizer` is
  // training_state's: the device optimizers read its learning rate at each
  // step, so model::set_learning_rate reaches them with nothing to copy.
  template <class Optimizer>
  void compiled(const Optimizer& optimizer) {
    loss_ = std::move(next_loss_);
    if (auto* per_output = dynamic_cast<cuda_output_losses*>(loss_.get()))
      per_output->attach(dynamic_cast<const detail::output_losses*>(training_.loss.get()));
    label_values_per_sample_ =
        loss_->form() == losses::label_form::sparse ? rows_per_sample : rows_per_sample * classes;
    initial_state_.iterations = 0;
    initial_state_.micro_batches = 0;  // a fresh accumulator
    if constexpr (sharded && across_processes)
      if (optimizers::ema_options_of(optimizer).use_ema)
        throw std::invalid_argument("compile on tf::cuda: use_ema under " + Strategy::name() +
                                    " is not built: each worker holds a shard of the average, and swapping it "
                                    "into the weights would gather it across the workers; use "
                                    "zero<k, mirrored<N>>, or multi_worker");
    pending_slots_.clear();
    for (std::size_t k = 0; k < replicas_.size(); ++k) {
      auto& r = replicas_[k];
      backend::cuda::device_guard on(r->device);
      r->optimizer = backend::cuda::make_device_optimizer(optimizer, parameter_table<Net>::tensors(),
                                                          Net::trainable_floats, initial_state_,
                                                          update_range(static_cast<int>(k)));
      *r->state_mirror() = initial_state_;
      r->forget_program();
      replication_.forget();
      r->arena = backend::cuda::device_buffer();
    }
    device_has_weights_ = false;
    // Which metrics the device counts (metric_hits.hpp); the outputs come
    // back only for the others.
    const bool sparse = loss_->form() == losses::label_form::sparse;
    metric_rules_.clear();
    outputs_to_host_ = false;
    for (const auto& m : training_.metrics) {
      metric_rules_.push_back(m->device_hits(sparse, classes));
      outputs_to_host_ = outputs_to_host_ || !metric_rules_.back();
    }
    for (auto& r : replicas_) {
      backend::cuda::device_guard on(r->device);
      r->prepare_hits(metric_rules_.size());
    }
  }

  // The GPUs' part of a training step (train/training_step.hpp): launch
  // enqueues step k (one graph replay on one GPU; on several, or across
  // workers, the replicas' work with the all-reduce in between) and
  // returns; the loop stages batch k + 1 while it runs; outcome waits.
  template <class Batch>
  struct step_ops {
    using batch_type = Batch;
    static constexpr int shard = shard_of<Strategy, Batch::size>();
    static constexpr int rows = shard * static_cast<int>(rows_per_sample);
    // A last partial batch (train/training_step.hpp): the captured step
    // keeps its row count, the row weights mask the padding
    // (stage_row_weights), and batch_norm's statistics count the samples the
    // step values say are present (backend/cuda/context.hpp).

    // One replica's share of the launch, enqueued on its compute stream.
    struct replica_step {
      engine& e;
      replica& r;
      int parity;
      program_type<shard>& program = e.template program_of<shard>(r);
      cudaStream_t s = r.compute.get();
      void forward() {
        TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(r.step_device.data(), r.step_host.data(),
                                            sizeof(backend::cuda::step_values), cudaMemcpyHostToDevice, s));
        TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(program.input(), r.staging[static_cast<std::size_t>(parity)].device.data(),
                                            r.feature_bytes, cudaMemcpyDeviceToDevice, s));
        r.run.training = true;
        program.forward();  // on r.context.stream, which is s
      }
      // The metrics read the outputs first: the loss may write its gradient
      // over them (Net::loss_gradient_in_place).
      void loss() {
        e.count_hits(r, cuda_outputs<Net>::stored(program.output()), parity, rows, s);
        if (e.outputs_to_host_) cuda_outputs<Net>::to_host(r.results() + rows, program.output(), rows, s);
        cuda_outputs<Net>::record(*e.loss_, program.output(), r.labels_on_device(parity), program.output_gradient(),
                                  program.row_losses(), rows, rows, s);
        if (e.weighted_[static_cast<std::size_t>(parity)]) {  // d_out[i, :] *= w[i], row_loss[i] *= w[i]
          const float* w = r.row_weights_on_device(parity);
          using scale = typeflow::detail::merge_fn::scale_rows;
          const std::size_t gradient_count = static_cast<std::size_t>(rows) * row_stride;
          if constexpr (Net::bf16_logits)
            backend::cuda::for_each_index(gradient_count,
                                          backend::cuda::weight_bf16_rows{
                                              w, reinterpret_cast<bf16*>(program.output_gradient()),
                                              static_cast<std::size_t>(row_stride)},
                                          s);
          else
            backend::cuda::for_each_index(gradient_count,
                                          scale{w, program.output_gradient(), program.output_gradient(),
                                                static_cast<std::size_t>(row_stride)},
                                          s);
          backend::cuda::for_each_index(static_cast<std::size_t>(rows),
                                        scale{w, program.row_losses(), program.row_losses(), 1}, s);
        }
      }
      void scale_output_gradient() {
        static_assert(!(loss_scaling && Net::bf16_logits), "bf16 logits come with a bfloat16 policy: no loss scale");
        if constexpr (loss_scaling)
          backend::cuda::map(program.output_gradient(), program.output_gradient(),
                             static_cast<std::size_t>(rows) * row_stride,
                             backend::cuda::multiply_by_device_value{&r.optimizer->state()->loss_scale}, s);
      }
    };

    engine& e;
    int valid = Batch::size;  // the step's samples (begin's)

    void check(const Batch& batch) const { check_token_ids_of<Net>(batch); }  // the CPU layer's message, on the host
    void stage(const Batch& batch, int parity) {
      e.template stage<shard>(batch, parity);
      e.weighted_[static_cast<std::size_t>(parity)] = e.template stage_row_weights<shard>(batch, parity);
    }
    // The step values of each replica: the step, and in a last partial
    // batch its samples present (batch_norm's statistics count them).
    void begin(int parity, int valid_samples) {
      valid = valid_samples;
      ++e.steps_;
      for (std::size_t k = 0; k < e.replicas_.size(); ++k) {
        auto& r = e.replicas_[k];
        backend::cuda::device_guard on(r->device);
        r->staging[static_cast<std::size_t>(parity)].copied.wait_on(r->compute.get());
        auto* values = r->step_host.template data<backend::cuda::step_values>();
        values->step = e.steps_;
        values->valid_samples = valid < Batch::size ? replica_valid(valid, static_cast<int>(k), shard) : -1;
        r->optimizer->prepare(e.training_.iterations + 1, r->compute.get());
      }
    }
    // One GPU: the step captured once per parity as a CUDA graph, then
    // replayed; otherwise enqueued as it comes.
    template <class Body>
    void record(int parity, Body&& body) {
      if constexpr (!replication::eager) {
        replica& r = *e.replicas_[0];
        backend::cuda::device_guard on(r.device);
        const auto p = static_cast<std::size_t>(parity);
        auto& graph = (e.weighted_[p] ? r.weighted_train_graph : r.train_graph)[p];
        if (!graph.captured()) graph.capture(r.compute.get(), [&](cudaStream_t) { body(); });
        graph.launch(r.compute.get());
      } else {
        body();
      }
    }
    template <class F>
    void each_replica(int parity, F&& f) {
      for (auto& r : e.replicas_) {
        backend::cuda::device_guard on(r->device);
        replica_step share{e, *r, parity};
        f(share);
      }
    }
    // Backward; with N > 1 or several workers layer by layer from the top,
    // across the replicas, each bucket's all-reduce starting as soon as its
    // layers are done.
    void backward_and_all_reduce() {
      if constexpr (!replication::eager) {
        e.template program_of<shard>(*e.replicas_[0]).backward();
      } else {
        std::array<cudaStream_t, replica_count> streams{};  // no allocation in the step
        for (std::size_t k = 0; k < e.replicas_.size(); ++k) streams[k] = e.replicas_[k]->compute.get();
        e.replication_.backward_all_reduced(streams, [&](int k, std::size_t i) {
          replica& r = *e.replicas_[static_cast<std::size_t>(k)];
          backend::cuda::device_guard on(r.device);
          e.template program_of<shard>(r).backward_layer(i);
        });
      }
    }
    // The step's mean loss first: without loss scaling a non-finite one
    // refuses the update on the device, as the CPU refuses it (the NaN
    // policy); the replicas of this process average theirs before, so that
    // all refuse alike. Then the update.
    void update() {
      for (auto& r : e.replicas_) {
        backend::cuda::device_guard on(r->device);
        e.template record_loss<shard>(*r, r->compute.get());
      }
      if constexpr ((replica_count > 1 || across_processes) && !loss_scaling) e.average_losses();
      e.record_update();
      if constexpr (Strategy::sync_statistics) e.average_statistics(valid, Batch::size, shard);
    }
    step_outcome outcome(int) { return e.template step_outcome_of<shard>(); }
    const float* outputs(int r, int) const { return e.replicas_[static_cast<std::size_t>(r)]->results() + rows; }
    // Each shard's labels are still in its pinned buffer: the next batch went to the other one.
    const typename Batch::label_value* labels(int r, int parity) const {
      using label = typename Batch::label_value;
      return e.replicas_[static_cast<std::size_t>(r)]->template labels_on_host<label>(parity);
    }
    std::optional<double> metric_hits(int r, int parity, std::size_t i) const {
      if (!e.metric_rules_[i]) return std::nullopt;
      return static_cast<double>(e.replicas_[static_cast<std::size_t>(r)]->hits_on_host(parity)[i]);
    }
  };
  template <class Batch>
  training_steps<Net, loss_scaling, step_ops<Batch>> steps() {
    take_label_width<Batch>();
    prepare_programs<step_ops<Batch>::shard>();
    return {training_, step_ops<Batch>{*this}};
  }

  // The loss and metrics over every sample of `data` (the last batch padded
  // and masked), in inference mode, on replica 0, without a graph.
  template <class Data>
  void evaluate(const Data& data, std::span<callback* const> callbacks = {}) {
    double penalty = 0;
    if constexpr (has_regularizers) {  // from the host copy of the weights, as the CPU computes it
      download_weights();
      penalty = apply_regularizers<Net>(host_.data(), false);
    }
    take_label_width<typename Data::element_type>();
    evaluation_loop<Net>(training_, data, inference_pass<Data::element_type::size>(), penalty, callbacks);
  }

  // The outputs for every sample of `data`, in inference mode, on replica 0.
  template <class Data>
  std::vector<float> predict(const Data& data, std::span<callback* const> callbacks = {}) {
    return predict_loop<Net>(data, inference_pass<Data::element_type::size>(), callbacks);
  }

  // model::generate on replica 0's device: the decoder's programs keeps its
  // key/value caches there, and each fed token brings back its Vocab logits,
  // from which the host samples (train/generation.hpp), as on the CPU.
  std::vector<std::int32_t> generate(std::span<const std::int32_t> prompt, int n, generate_options options) {
    replica& r = *replicas_[0];
    decoder_type& program = r.decoder_for(*this);
    backend::cuda::device_guard on(r.device);
    decoder_view view{program, r};
    return generate_tokens<Net::input_shape_type::template dim<0>, classes>(view, r.run, prompt, n, options);
  }

  // The host copy of the parameter region, brought up to date first.
  std::span<const float> parameters() const {
    download_weights();
    return {host_.template at<float>(0), Net::parameter_floats};
  }
  // For writing: the devices take it before the next step.
  std::span<float> writable_parameters() {
    download_weights();
    device_has_weights_ = false;
    return {host_.template at<float>(0), Net::parameter_floats};
  }
  // The last step's mean gradient, copied from replica 0's device; under
  // zero<2> each shard from the replica that holds its mean (across
  // workers gathered first, a collective that every worker calls).
  std::span<const float> gradients() const {
    gradients_host_.assign(Net::trainable_floats, 0.f);
    if constexpr (zero_stage_v<Strategy> >= 2 && across_processes) {
      replica& r = *replicas_[0];
      if (r.arena.size()) {
        backend::cuda::device_guard on(r.device);
        const std::array<float*, 1> region{reinterpret_cast<float*>(r.arena.data() + plan0::gradients_offset)};
        const std::array<cudaStream_t, 1> stream{r.compute.get()};
        const_cast<replication&>(replication_).all_gather_shards(region, stream, "the mean gradient's all-gather");
        const_cast<replication&>(replication_).wait(r.compute);
      }
    }
    for (std::size_t k = 0; k < replicas_.size(); ++k) {
      const replica& r = *replicas_[k];
      if (!r.arena.size()) continue;
      const optimizers::device::plan_range range =
          zero_stage_v<Strategy> >= 2 && !across_processes ? held_range(static_cast<int>(k))
                                                           : optimizers::device::plan_range{0, Net::trainable_floats};
      backend::cuda::device_guard on(r.device);
      TYPEFLOW_CUDA_CHECK(cudaMemcpy(gradients_host_.data() + range.begin,
                                     r.arena.data() + plan0::gradients_offset + range.begin * sizeof(float),
                                     (range.end - range.begin) * sizeof(float), cudaMemcpyDeviceToHost));
      if (zero_stage_v<Strategy> < 2 || across_processes) break;  // replica 0's whole region
    }
    return gradients_host_;
  }
  // Replica r's parameter region, copied from its device (mirrored<N>: all equal).
  std::vector<float> replica_parameter_region(int r) const {
    const auto& rep = *replicas_.at(static_cast<std::size_t>(r));
    if (!rep.arena.size()) {
      const auto host = parameters();
      return std::vector<float>(host.begin(), host.end());
    }
    std::vector<float> out(Net::parameter_floats);
    backend::cuda::device_guard on(rep.device);
    TYPEFLOW_CUDA_CHECK(cudaMemcpy(out.data(), rep.arena.data(), plan0::parameter_bytes, cudaMemcpyDeviceToHost));
    return out;
  }

  // What a checkpoint keeps (train/checkpointing.hpp): the model's seed,
  // the dropout step counter, the loss-scale state as the last finished
  // step left it; and each optimizer slot, replica 0's, through the host.
  engine_counters counters() const {
    return {seed_, steps_, static_cast<const precision::loss_scale_state&>(*replicas_[0]->state_mirror())};
  }
  // After training_state's counters (iterations) were restored.
  void restore(const engine_counters& saved) {
    seed_ = saved.seed;
    const std::uint64_t seed = replication_.worker_seed(saved.seed);
    for (std::size_t r = 0; r < replicas_.size(); ++r)
      replicas_[r]->run.seed = replica_seed(seed, static_cast<int>(r));
    steps_ = saved.dropout_step;
    step_state fresh = initial_state_;
    static_cast<precision::loss_scale_state&>(fresh) = saved.loss_scale;
    fresh.inverse_loss_scale = 1.f / fresh.loss_scale;
    // accumulate<K>: the micro-batches the checkpoint holds (their sum is the accumulator slot).
    if (training_.optimizer) fresh.micro_batches = training_.optimizer->pending_micro_batches();
    restart_loss_scale(fresh);
  }
  // Slot s's region on the host (valid until the next call for s): replica
  // 0's, or under zero<k, mirrored<N>> every replica's shard. A worker of
  // zero<k, multi_worker> holds its shard alone: slot_shard reads it.
  std::span<const float> slot_values(int s) const {
    if constexpr (sharded && across_processes)
      throw std::logic_error("slot_values: under " + Strategy::name() + " on tf::cuda each worker holds its shard of "
                             "slot " + std::to_string(s) + "; slot_shard() reads it");
    auto& host = slots_host_.at(static_cast<std::size_t>(s));
    host.assign(Net::trainable_floats, 0.f);
    if (pending_slots_.size() > static_cast<std::size_t>(s) && !pending_slots_[static_cast<std::size_t>(s)].empty()) {
      host = pending_slots_[static_cast<std::size_t>(s)];
    } else {
      for (std::size_t k = 0; k < replicas_.size(); ++k) {
        download_slot(static_cast<int>(k), s, host.data());
        if constexpr (!sharded) break;  // replica 0's: they are alike
      }
    }
    return host;
  }
  // Replaces slot s on every replica (its shard of it under zero<k>), when
  // the next step lays its arena out.
  void set_slot_values(int s, std::span<const float> values) {
    if (values.size() != Net::trainable_floats)
      throw std::invalid_argument("set_slot_values: " + std::to_string(values.size()) +
                                  " floats for a slot of " + std::to_string(Net::trainable_floats));
    pending_slot(s).assign(values.begin(), values.end());
  }
  // zero<k>: the cut of the trainable region into shards (count + 1
  // bounds), the shards this process holds (every replica's under
  // mirrored<N>, its own across workers) and shard i's part of slot s, in
  // host memory that goes to the device before the next step: what a
  // sharded checkpoint writes and loads, rank by rank.
  std::vector<std::size_t> shard_cut() const
    requires sharded
  {
    return replication_.shard_cut();
  }
  std::vector<int> held_shards() const
    requires sharded
  {
    return replication_.held_shards();
  }
  std::span<float> slot_shard(int i, int s)
    requires sharded
  {
    const std::vector<int> held = held_shards();
    const auto at = std::find(held.begin(), held.end(), i);
    if (at == held.end())
      throw std::logic_error("slot_shard: this process does not hold shard " + std::to_string(i) + " of " +
                             Strategy::name());
    const std::vector<std::size_t> cut = shard_cut();
    const bool fresh = pending_slots_.size() <= static_cast<std::size_t>(s) ||
                       pending_slots_[static_cast<std::size_t>(s)].empty();
    std::vector<float>& slot = pending_slot(s);
    if (fresh) {  // the held shards from their devices (zeros before the first step)
      slot.assign(Net::trainable_floats, 0.f);
      for (std::size_t k = 0; k < replicas_.size(); ++k) download_slot(static_cast<int>(k), s, slot.data());
    }
    const auto index = static_cast<std::size_t>(i);
    return {slot.data() + cut[index], cut[index + 1] - cut[index]};
  }
  // zero<k, multi_worker>: `work` here, and whether it succeeded on every
  // worker (distribute::all_or_none).
  template <class Work>
  void all_or_none(const std::string& step, Work&& work) const
    requires(sharded && across_processes)
  {
    distribute::all_or_none(strategy_.inner, step, std::forward<Work>(work));
  }

  // Loss scaling (mixed_float16 only), as on the CPU: dynamic by default
  // (Keras's LossScaleOptimizer), or fixed; setting it starts afresh. The
  // scale and the skip decision live on the device; these read what the
  // last finished step left.
  template <class Options>
  void set_loss_scale(Options options) {
    restart_loss_scale(optimizers::device::make_step_state(options));
  }
  float loss_scale() const { return loss_scaling ? replicas_[0]->state_mirror()->loss_scale : 1.f; }
  std::int64_t skipped_steps() const { return loss_scaling ? replicas_[0]->state_mirror()->skipped : 0; }

 private:
  // Replica 0 draws the model's (worker's) dropout masks; the others their own, as on the CPU.
  static std::uint64_t replica_seed(std::uint64_t seed, int r) {
    return distribute::replica_seed(seed, r);
  }

  // Where the step region starts: after the parameters, gradients and slots.
  std::size_t step_base() const {
    return slot_offset(training_.slots);
  }

  // Every replica's program for the shard size, and the strategy's
  // all-reduce over their gradient regions.
  template <int Shard>
  void prepare_programs() {
    for (auto& r : replicas_) r->template program_for<Shard>(*this);
    std::array<float*, replica_count> gradients{};
    for (std::size_t k = 0; k < replicas_.size(); ++k)
      gradients[k] = reinterpret_cast<float*>(replicas_[k]->arena.data() + plan0::gradients_offset);
    replication_.prepare(gradients);
  }

  template <int Shard>
  program_type<Shard>& program_of(replica& r) {
    return r.program.template get<program_type<Shard>>();
  }

  // The batch's shards into each replica's pinned buffer, and their uploads.
  template <int Shard, class Batch>
  void stage(const Batch& batch, int parity) {
    check_label_bytes<Batch>();
    constexpr std::size_t features_per_shard = static_cast<std::size_t>(Shard) * Batch::features_type::size;
    constexpr std::size_t labels_per_shard = static_cast<std::size_t>(Shard) * Batch::label_type::size;
    for (int r = 0; r < replica_count; ++r)
      replicas_[static_cast<std::size_t>(r)]->stage(batch.features.data() + r * features_per_shard,
                                                   batch.labels.data() + r * labels_per_shard, parity);
  }

  // mirrored<N, sync_batch_norm_statistics>: every replica's batch_norm
  // moving statistics become their mean, after each step. The CPU averages
  // them after each update (train/cpu_replicas.hpp); a moving average is
  // linear in the batch statistics, so averaging after every step gives the
  // same statistics at every update.
  // In a last partial batch (valid < batch samples, `shard` a replica) each
  // replica's statistics weigh by its share of the valid samples, as on the
  // CPU (cpu_replicas::weigh_statistics): scaled by N times that share
  // before the mean, so that a replica without samples counts for nothing.
  void average_statistics(int valid, int batch, int shard) {
    const bool weighed = replica_count > 1 && valid < batch;
    for (const auto& t : parameter_table<Net>::tensors()) {
      if (t.kind != param_kind::statistic) continue;
      const auto at = [&](replica& r) { return reinterpret_cast<float*>(r.arena.data()) + t.offset; };
      if (weighed)
        for (int k = 0; k < replica_count; ++k) {
          replica& r = *replicas_[static_cast<std::size_t>(k)];
          backend::cuda::device_guard on(r.device);
          const float share = static_cast<float>(replica_valid(valid, k, shard)) / static_cast<float>(valid);
          backend::cuda::scale(at(r), t.size, static_cast<float>(replica_count) * share, r.compute.get());
        }
      average_across_replicas(at, t.size, "ncclAllReduce (the batch_norm statistics' mean)");
    }
  }
  // The `floats` values at at(replica) on every replica become their mean
  // over the job's replicas (mirrored<N>'s, or across processes the
  // workers'), on the replicas' compute streams; what names it in an error.
  template <class At>
  void average_across_replicas(At&& at, std::size_t floats, const char* what) {
    std::array<cudaStream_t, replica_count> streams{};
    std::array<float*, replica_count> buffers{};
    for (std::size_t k = 0; k < replicas_.size(); ++k) {
      streams[k] = replicas_[k]->compute.get();
      buffers[k] = at(*replicas_[k]);
    }
    replication_.average(buffers.data(), floats, streams.data(), what);
  }

  // Each replica's row weights for a staged batch, and their upload
  // (train/row_weights.hpp's replica_row_weights: class_weight, sample
  // weights, a last partial batch's mask); false, with nothing staged,
  // where every row weighs 1.
  template <int Shard, class Batch>
  bool stage_row_weights(const Batch& batch, int parity) {
    if (!weighs_rows(batch, training_.class_weights)) return false;
    for (int k = 0; k < replica_count; ++k) {
      replica& r = *replicas_[static_cast<std::size_t>(k)];
      replica_row_weights(batch, training_.class_weights, k, replica_count, Shard, rows_per_sample, classes,
                          replica_valid(batch.valid, k, Shard), r.row_weights_on_host(parity));
      r.stage_row_weights(parity);
    }
    return true;
  }

  // Each metric the device counts (metric_hits.hpp): its hits over the
  // step's valid rows (the step values' count), zeroed first, then copied to
  // the parity's host buffer.
  template <class Output>  // float, or bf16 logits
  void count_hits(replica& r, const Output* outputs, int parity, int rows, cudaStream_t s) {
    if (std::none_of(metric_rules_.begin(), metric_rules_.end(), [](const auto& rule) { return rule.has_value(); }))
      return;
    unsigned long long* hits = r.hits_on_device(parity);
    const std::size_t bytes = metric_rules_.size() * sizeof(unsigned long long);
    TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(hits, 0, bytes, s));
    const bool sparse = loss_->form() == losses::label_form::sparse;
    for (std::size_t i = 0; i < metric_rules_.size(); ++i)
      if (metric_rules_[i])
        backend::cuda::count_hits(*metric_rules_[i], sparse, outputs, r.labels_on_device(parity), rows, classes,
                                  backend::cuda::valid_samples_on_device(r.context.step),
                                  static_cast<int>(rows_per_sample), hits + i, s, row_stride);
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(r.hits_on_host(parity), hits, bytes, cudaMemcpyDeviceToHost, s));
  }

  // The step's mean loss, reduced on the device into the replica's scalars.
  template <int Shard>
  void record_loss(replica& r, cudaStream_t s) {
    constexpr int rows = Shard * static_cast<int>(rows_per_sample);
    backend::cuda::mean_of(program_of<Shard>(r).row_losses(), rows, r.step_scalars.template data<float>(), s);
  }
  // mirrored<N>: the replicas' mean losses become their mean (the host's
  // figure is that mean either way); multi_worker: the workers' mean, the
  // job's, which each worker's history then shows for the step (as Keras
  // reduces its logs across replicas). So their NaN verdicts agree.
  void average_losses() {
    average_across_replicas([](replica& r) { return r.step_scalars.template data<float>(); }, 1,
                            "the step's mean loss");
  }

  // The step's end on every replica: regularizers, the optimizer's passes
  // (refusing the update for a non-finite loss without loss scaling;
  // under zero<k> each pass's statistics summed over the shards and the
  // updated weights all-gathered), then what the host reads back: the step
  // state and the mean loss (the outputs went back before the loss, and
  // only for a metric that the device does not count: replica_step::loss).
  void record_update() {
    std::array<cudaStream_t, replica_count> streams{};
    for (std::size_t k = 0; k < replicas_.size(); ++k) streams[k] = replicas_[k]->compute.get();
    const auto each = [&](auto&& f) {
      for (std::size_t k = 0; k < replicas_.size(); ++k) {
        backend::cuda::device_guard on(replicas_[k]->device);
        f(*replicas_[k], streams[k]);
      }
    };
    if constexpr (has_regularizers) each([&](replica& r, cudaStream_t s) { regularize(r, s); });
    const int passes = replicas_[0]->optimizer->update_passes();
    for (int pass = 0; pass < passes; ++pass) {
      std::array<backend::cuda::measured_statistics, replica_count> measured{};
      std::size_t k = 0;
      each([&](replica& r, cudaStream_t s) {
        float* scalars = r.step_scalars.template data<float>();
        measured[k++] = r.optimizer->record_pass(pass, r.arena.data(), plan0::gradients_offset, slot_offsets(), s,
                                                 loss_scaling ? nullptr : scalars);
      });
      if constexpr (sharded)
        if (pass + 1 < passes) replication_.sum_statistics(measured, streams);
    }
    if constexpr (sharded) {
      std::array<float*, replica_count> weights{};
      for (std::size_t k = 0; k < replicas_.size(); ++k)
        weights[k] = reinterpret_cast<float*>(replicas_[k]->arena.data());
      replication_.all_gather_shards(weights, streams, "the updated weights' all-gather");
    }
    each([&](replica& r, cudaStream_t s) {
      float* scalars = r.step_scalars.template data<float>();
      TYPEFLOW_CUDA_CHECK(
          cudaMemcpyAsync(r.state_mirror(), r.optimizer->state(), sizeof(step_state), cudaMemcpyDeviceToHost, s));
      TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(r.step_scalars_host.data(), scalars,
                                          (has_regularizers ? 2 : 1) * sizeof(float), cudaMemcpyDeviceToHost, s));
    });
  }
  // Regularizers on the (all-reduced) gradients, still scaled under
  // mixed_float16: their gradients are scaled alike before the optimizer's
  // statistics pass unscales everything. The penalty goes to scalars[1].
  void regularize(replica& r, cudaStream_t s) {
    float* scalars = r.step_scalars.template data<float>();
    backend::cuda::apply_regularization(
        reinterpret_cast<const float*>(r.arena.data()),
        reinterpret_cast<float*>(r.arena.data() + plan0::gradients_offset),
        r.regularization_table.template data<backend::cuda::regularization_entry>(), r.regularized_tensors,
        loss_scaling ? &r.optimizer->state()->loss_scale : nullptr, scalars + 1,
        r.regularization_partials.template data<double>(), s);
  }

  // Replica k's range of the trainable region for its optimizer: the whole
  // region, or under zero<k> its shard.
  optimizers::device::plan_range update_range(int k) const {
    if constexpr (sharded) {
      const std::vector<std::size_t>& cut = replication_.shard_cut();
      const auto i = static_cast<std::size_t>(replication_.shard_of(k));
      return {cut[i], cut[i + 1]};
    }
    return {};
  }
  // The bytes of one optimizer slot in a replica's arena: the trainable
  // region, or under zero<k> the longest shard; and where slot s starts.
  std::size_t slot_bytes() const {
    if constexpr (sharded) return replication_.shard_floats() * sizeof(float);
    return plan0::trainable_bytes;
  }
  std::size_t slot_offset(int s) const { return plan0::slots_offset + static_cast<std::size_t>(s) * slot_bytes(); }
  // The part of the trainable region replica k's slots hold: all of it, or its shard.
  optimizers::device::plan_range held_range(int k) const {
    if constexpr (sharded) return update_range(k);
    return {0, Net::trainable_floats};
  }
  // Replica k's part of slot s (held_range) into `into` (a whole slot's
  // floats), when its arena exists.
  void download_slot(int k, int s, float* into) const {
    const replica& r = *replicas_[static_cast<std::size_t>(k)];
    if (!r.arena.size()) return;
    const optimizers::device::plan_range range = held_range(k);
    backend::cuda::device_guard on(r.device);
    TYPEFLOW_CUDA_CHECK(cudaMemcpy(into + range.begin, r.arena.data() + slot_offset(s),
                                   (range.end - range.begin) * sizeof(float), cudaMemcpyDeviceToHost));
  }
  // Slot s's host copy that the next upload sends (every held part of it):
  // the devices take the weights and it before the next step.
  std::vector<float>& pending_slot(int s) {
    pending_slots_.resize(std::max(pending_slots_.size(), static_cast<std::size_t>(training_.slots)));
    download_weights();           // the host copy is what the next upload sends
    device_has_weights_ = false;  // the next step uploads the weights and every pending slot, once
    return pending_slots_.at(static_cast<std::size_t>(s));
  }

  std::array<std::size_t, 8> slot_offsets() const {
    std::array<std::size_t, 8> offsets{};
    for (int s = 0; s < training_.slots && s < 8; ++s) offsets[static_cast<std::size_t>(s)] = slot_offset(s);
    return offsets;
  }

  // Waits for the step; what it left: the mean loss over the replicas,
  // the penalty, the device's verdict and its iteration count.
  template <int Shard>
  step_outcome step_outcome_of() {
    step_outcome outcome;
    for (auto& r : replicas_) {
      backend::cuda::device_guard on(r->device);
      replication_.wait(r->compute);  // multi_worker: a dead or stalled worker is an error naming the rank
      outcome.loss += static_cast<double>(r->scalars()[0]) / replica_count;  // the shard's mean loss
    }
    if constexpr (has_regularizers) outcome.penalty = replicas_[0]->scalars()[1];  // every replica's weights are alike
    const step_state& mirror = *replicas_[0]->state_mirror();
    // Without loss scaling a step whose gradients are not all updatable
    // (NaN, infinity, above 2^60) was refused on the device.
    outcome.gradients_refused = !mirror.skip_non_finite && !mirror.last_finite;
    outcome.iterations = mirror.iterations;  // a skipped step (loss scaling) did not count
    // accumulate<K>: the host's optimizer tells a checkpoint how many micro-batches the device holds.
    if (mirror.micro_batches_per_update > 0) training_.optimizer->restore_pending_micro_batches(mirror.micro_batches);
    host_stale_ = true;
    return outcome;
  }

  // predict's and evaluate's view of replica 0's program for batch size N.
  template <int N>
  cuda_inference_pass<Net, N> inference_pass() {
    replica& r = *replicas_[0];
    return {r, r.template program_for<N>(*this), loss_.get(), label_values_per_sample_, training_};
  }

  template <class Batch>
  void check_label_bytes() const {
    check_device_label_bytes<Batch>(label_values_per_sample_, training_.loss->name());
  }
  // Several outputs: the labels are the batch's packed record (fit's
  // bind_labels checked it against the outputs by name).
  template <class Batch>
  void take_label_width() {
    if constexpr (packed_outputs) {
      if (label_values_per_sample_ == Batch::label_type::size) return;
      label_values_per_sample_ = Batch::label_type::size;
      for (auto& r : replicas_) r->forget_program();  // their staging buffers are laid out again
      replication_.forget();
    }
  }

  void restart_loss_scale(step_state fresh) {
    fresh.iterations = training_.iterations;
    initial_state_ = fresh;
    for (auto& r : replicas_) {
      if (r->optimizer) {
        backend::cuda::device_guard on(r->device);
        r->optimizer->reset_state(fresh);
      }
      *r->state_mirror() = fresh;
    }
  }

  // Host -> every replica: the parameter region (multi_worker: rank 0's, to every worker).
  void upload_weights() {
    for (auto& r : replicas_) {
      if (!r->arena.size()) continue;  // laid out later; program_for uploads then
      backend::cuda::device_guard on(r->device);
      TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(r->arena.data(), host_.data(), plan0::parameter_bytes,
                                          cudaMemcpyHostToDevice, r->compute.get()));
      if (replication_.broadcast_weights(reinterpret_cast<float*>(r->arena.data()), Net::parameter_floats, r->compute))
        host_stale_ = true;  // the host may hold another rank's weights until the next download
      r->compute.synchronize();
    }
    device_has_weights_ = std::all_of(replicas_.begin(), replicas_.end(), [](auto& r) { return r->arena.size() > 0; });
    // Slots a checkpoint set (set_slot_values, slot_shard), once every
    // replica has its arena: the whole slot, or under zero<k> its shard.
    if (device_has_weights_ && !pending_slots_.empty()) {
      for (std::size_t k = 0; k < replicas_.size(); ++k) {
        auto& r = replicas_[k];
        backend::cuda::device_guard on(r->device);
        const optimizers::device::plan_range range = held_range(static_cast<int>(k));
        for (std::size_t s = 0; s < pending_slots_.size(); ++s)
          if (!pending_slots_[s].empty())
            backend::cuda::copy_to_device(r->arena.data() + slot_offset(static_cast<int>(s)),
                                          pending_slots_[s].data() + range.begin,
                                          (range.end - range.begin) * sizeof(float));
      }
      pending_slots_.clear();
    }
    if constexpr (!across_processes) host_stale_ = false;
  }
  // Replica 0 -> host, when the devices trained since the last copy.
  void download_weights() const {
    const auto& r = *replicas_[0];
    if (!host_stale_ || !r.arena.size()) return;
    backend::cuda::device_guard on(r.device);
    TYPEFLOW_CUDA_CHECK(cudaMemcpy(host_.data(), r.arena.data(), plan0::parameter_bytes,
                                   cudaMemcpyDeviceToHost));
    host_stale_ = false;
  }

  [[no_unique_address]] Strategy strategy_{};  // first: multi_worker starts MPI before anything else
  training_state<Net>& training_;  // the model's: optimizer, loss, metrics, counters, means
  mutable arena host_;             // the parameter region on the host: initialisation, weights files, views
  mutable std::vector<float> gradients_host_;  // gradients(): replica 0's, copied back
  std::uint64_t seed_;             // the model's
  std::uint64_t steps_ = 0;        // training steps begun: dropout's counter, as run_state::step on the CPU
  std::array<bool, 2> weighted_{};  // whether each parity's staged step weighs its rows (stage_row_weights)
  mutable std::array<std::vector<float>, training_state<Net>::max_slots> slots_host_;  // slot_values()' copies
  std::vector<std::vector<float>> pending_slots_;  // set_slot_values' slots, until every arena is laid out
  step_state initial_state_ = loss_scaling ? optimizers::device::make_step_state(precision::dynamic_loss_scale{})
                                           : optimizers::device::make_step_state();
  replication replication_;  // mirrored<N>'s and multi_worker's communicators and all-reduce
  std::vector<std::unique_ptr<replica>> replicas_;  // destroyed before the communicators
  std::unique_ptr<backend::cuda::device_loss_base> loss_, next_loss_;  // the compiled loss's executor; check_compile's
  std::size_t label_values_per_sample_ = rows_per_sample;           // what the loss takes (sparse until compiled)
  // Per metric: the hit rule the device counts it by, or none (its update
  // reads the outputs on the host); whether any reads them.
  std::vector<std::optional<hit_count_rule>> metric_rules_;
  bool outputs_to_host_ = false;
  bool device_has_weights_ = false;
  mutable bool host_stale_ = false;  // the devices trained since the host copy
};

}  // namespace typeflow

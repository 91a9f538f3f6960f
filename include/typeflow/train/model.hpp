// model<Net, Policy, Strategy, Device>: Keras's Model, with the network as a type.
//
//   tf::model<mlp> model{/*seed=*/42};
//   model.summary();
//   model.compile(tf::optimizers::adam{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
//                 tf::metrics::accuracy{});
//   auto history = model.fit(train, {.epochs = 3, .validation_data = test});
//   model.evaluate(test); model.predict(test); model.save_weights("mlp.safetensors");
//
// The model owns one arena (see memory_plan.hpp). compile() sizes the
// optimizer's slots; fit/evaluate/predict set up a step_program for the
// dataset's compile-time batch size, and then each step runs forward, loss,
// backward and update over fixed addresses with no allocation.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "typeflow/backend/cpu/context.hpp"
#include "typeflow/backend/device.hpp"
#include "typeflow/core/dtype.hpp"
#include "typeflow/core/random.hpp"
#include "typeflow/core/strided_view.hpp"
#include "typeflow/data/any_dataset.hpp"
#include "typeflow/data/example.hpp"
#include "typeflow/distribute/mirrored.hpp"
#include "typeflow/distribute/single_device.hpp"
#include "typeflow/io/safetensors.hpp"
#include "typeflow/model/memory_plan.hpp"
#include "typeflow/model/sequential.hpp"
#include "typeflow/model/summary.hpp"
#include "typeflow/precision/loss_scale.hpp"
#include "typeflow/precision/policy.hpp"
#include "typeflow/precision/storage.hpp"
#include "typeflow/train/arena.hpp"
#include "typeflow/train/callback.hpp"
#include "typeflow/train/compiled.hpp"
#include "typeflow/train/generation.hpp"
#include "typeflow/train/history.hpp"
#include "typeflow/train/initialization.hpp"
#include "typeflow/train/parameter_table.hpp"
#include "typeflow/train/progress_bar.hpp"
#include "typeflow/train/regularization.hpp"
#include "typeflow/train/step_program.hpp"
#include "typeflow/train/training_state.hpp"

// The CPU's executors, where a CPU model sets up its step programs. A CUDA
// translation unit parses none of them: nvcc 13 cannot compile oneDNN's C++
// header (backend/cpu/context.hpp), and model<..., cpu> refuses to train there.
#if !defined(__CUDACC__)
#include "typeflow/backend/cpu/executors.hpp"
#endif

namespace typeflow {

namespace detail {
// model<Net, float32> means the float32 policy.
template <class Policy>
struct policy_of {
  using type = Policy;
};
template <>
struct policy_of<float32> {
  using type = float32_policy;
};

// The compute dtype of the values the loss receives: the last layer's,
// looking through the layers that pass their input's dtype on (relu after a
// dense receives the dense's rounding).
template <class Net, std::size_t I = Net::layer_count - 1>
struct loss_input_dtype {
  using type = std::conditional_t<
      I == 0 || dtype_flow_of<typename Net::template spec<I>> != dtype_flow::passes_through,
      typename Net::template layer<I>::compute_dtype,
      typename loss_input_dtype<Net, (I > 0 ? I - 1 : 0)>::type>;
};
template <class Net>
struct loss_input_dtype<Net, 0> {
  using type = float32;
};
}  // namespace detail

template <class Network, class Policy = float32, class Strategy = single_device, class Device = cpu>
class model {
  static_assert(is_sequential_v<Network>, "model<Net>: Net must be a sequential<input<...>, layers...>");
  static_assert(is_policy_v<typename detail::policy_of<Policy>::type>,
                "model<Net, Policy>: Policy is float32, mixed_float16, mixed_bfloat16 or a policy<Param, Compute, Output>");
  static_assert(std::is_same_v<Device, cpu> || std::is_same_v<Device, cuda>,
                "model<Net, Policy, Strategy, Device>: Device is cpu or cuda");
  static_assert(!std::is_same_v<Device, cuda>,
                "model<Net, Policy, Strategy, cuda> is defined in typeflow/cuda.cuh: include it in a CUDA "
                "translation unit (a .cu file compiled by nvcc, linked to typeflow::cuda)");
 public:
  using policy_type = typename detail::policy_of<Policy>::type;

 private:
  // The network bound under the policy: every fact below is read from it.
  using Net = typename Network::template under<policy_type>;
  static_assert(!precision::is_16bit_v<typename detail::loss_input_dtype<Net>::type>,
                "model<Net, mixed policy>: the loss would receive 16-bit outputs, which lose precision "
                "(and overflow in float16). Compute the output layer in float32, as Keras's dtype=\"float32\": "
                "e.g. dense<10, float32>, or end with softmax, which always computes in float32");

  static_assert(std::is_same_v<typename Net::input_dtype, float32> || std::is_same_v<typename Net::input_dtype, int32>,
                "model<Net>: the network's input must be float32 features or int32 token ids");

 public:
  using network = Network;
  using bound_network = Net;
  static constexpr bool loss_scaling = policy_type::loss_scaling;
  using output_shape_type = typename Net::output_shape_type;
  static constexpr int classes = output_shape_type::rank >= 1 ? output_shape_type::template dim<-1> : 1;
  static constexpr std::size_t rows_per_sample = output_shape_type::size / classes;
  static constexpr std::size_t parameter_count = Net::parameter_count;
  static constexpr int replica_count = Strategy::replicas;

  // Initialises every parameter from the seed: the same seed gives the same
  // weights, bit for bit, and (with a seeded pipeline) the same training run.
  explicit model(std::uint64_t seed = 0) : seed_(seed) {
    memory_.reserve(memory_plan<Net, 0, 0>::gradients_offset, 0);
    run_.seed = seed;
    initialize_parameters();
    if constexpr (requires { strategy_.broadcast(static_cast<float*>(nullptr), std::size_t{0}); })
      strategy_.broadcast(memory_.template at<float>(0), Net::parameter_floats);  // every worker starts alike
    if constexpr (requires { strategy_.rank(); })
      if (strategy_.rank() > 0)  // each worker draws its own dropout masks
        run_.seed = mix_seed(seed, 0x3C0A1u + static_cast<std::uint64_t>(strategy_.rank()));
    if constexpr (replica_count > 1) {
      for (int r = 1; r < replica_count; ++r) {
        auto replica = std::make_unique<replica_state>();
        replica->memory.reserve(memory_plan<Net, 0, 0>::slots_offset, 0);
        replica->run.seed = mix_seed(seed, 0x5EB1CAu + static_cast<std::uint64_t>(r));  // its own dropout masks
        secondaries_.push_back(std::move(replica));
      }
      pool_ = std::make_unique<replica_pool>(replica_count, std::max(1, omp_get_max_threads() / replica_count));
    }
  }

  model(const model&) = delete;
  model& operator=(const model&) = delete;

  // Keras's table: layer, output shape, parameter count, totals.
  void summary(std::FILE* out = stdout) const { print_summary<Net>(out); }

  template <optimizers::optimizer Optimizer, losses::loss Loss, detail::metric... Metrics>
  void compile(Optimizer optimizer, Loss loss, Metrics... metrics) {
    training_.compile(std::move(optimizer), std::move(loss), std::move(metrics)...);
    // Fresh optimizer state; the weights stay.
    program_.reset();
    memory_.reserve(step_base(), memory_plan<Net, 0, 0>::gradients_offset);
    std::memset(memory_.data() + memory_plan<Net, 0, 0>::gradients_offset, 0,
                step_base() - memory_plan<Net, 0, 0>::gradients_offset);
  }

  // Trains for options.epochs passes over `train`, a batched dataset whose
  // batch size N is part of its type. A last partial batch is dropped.
  template <data::batched_dataset Dataset>
  history fit(const Dataset& train, fit_options<typename Dataset::element_type> options = {}) {
    using batch_type = typename Dataset::element_type;
    training_.template check_labelled<batch_type>("fit");
    fit_steps<batch_type> steps{*this};
    return fit_loop<Net, loss_scaling>(training_, steps, train, std::move(options), is_chief());
  }

  // One optimisation step on one full batch, as Keras's train_on_batch:
  // returns the batch's mean loss. Metrics accumulate until the next fit,
  // evaluate or reset.
  template <int N, class Features, class Label>
  double train_on_batch(const data::batch_of<N, Features, Label>& batch) {
    using batch_type = data::batch_of<N, Features, Label>;
    training_.template check_labelled<batch_type>("train_on_batch");
    training_state<Net>::check_full(batch);
    return step_on(batch);
  }

  // The loss and metrics over every sample of `data` (the last batch is
  // padded and masked), in inference mode.
  template <data::batched_dataset Dataset>
  evaluation evaluate(const Dataset& data) {
    using batch_type = typename Dataset::element_type;
    training_.template check_labelled<batch_type>("evaluate");
    auto& program = program_for<batch_type::size>();
    run_evaluation(program, data);
    return training_.results();
  }

  // The model's outputs for every sample of `data`, (samples, output shape)
  // row-major; labels, if any, are ignored.
  template <data::batched_dataset Dataset>
  std::vector<float> predict(const Dataset& data) {
    using batch_type = typename Dataset::element_type;
    training_state<Net>::template check_batch_type<batch_type>();
    auto& program = program_for<batch_type::size>();
    std::vector<float> outputs;
    if (data.cardinality() > 0)
      outputs.reserve(static_cast<std::size_t>(data.cardinality()) * batch_type::size * output_shape_type::size);
    batch_type batch;
    auto cursor = data.open(0);
    run_.training = false;
    while (cursor.next(batch)) {
      std::memcpy(program.input(), batch.features.data(), batch.features.size() * sizeof(batch.features.data()[0]));
      program.forward();
      const float* out = program.output();
      outputs.insert(outputs.end(), out, out + static_cast<std::size_t>(batch.valid) * output_shape_type::size);
    }
    return outputs;
  }

  // Continues `prompt` (token ids) by n tokens sampled from the model, and
  // returns the n new ids, through the network's decoder with its key/value
  // caches (train/generation.hpp says how the context is kept).
  std::vector<std::int32_t> generate(std::span<const std::int32_t> prompt, int n, generate_options options = {}) {
    static_assert(std::is_same_v<typename Net::input_dtype, int32> && Net::input_shape_type::rank == 1,
                  "generate: the network must take a sequence of int32 token ids, typed_input<int32, T>");
    using decoder = typename Net::decoder;
    static_assert(decoder::parameter_floats == Net::parameter_floats,
                  "generate: a layer's parameters depend on the sequence length, so the decoder cannot share them");
    check_generate_arguments(prompt, n, options, classes);
    return generate_tokens<Net::input_shape_type::template dim<0>, classes>(decoder_program(), run_, prompt, n, options);
  }

  // Parameters as safetensors, named "layers.<position>.<name>" with their
  // shapes, e.g. layers.1.kernel (784, 512). Written to a temporary file and
  // renamed, so a crash never leaves a partial file under `path`.
  void save_weights(const std::filesystem::path& path) const {
    if (!is_chief()) return;  // every worker holds the same weights; the chief writes them
    std::vector<std::vector<float>> values;  // rows unpadded, as the file wants them
    std::vector<io::tensor_to_write> tensors;
    for_each_parameter([&](const parameter_info& p) {
      const auto view = stored(p, 0);
      values.emplace_back(view.begin(), view.end());
      tensors.push_back({p.name, "F32", p.shape, values.back().data(), p.size * sizeof(float)});
    });
    io::write_safetensors(path, tensors, {{"format", "typeflow"}});
  }

  // Reads weights saved by save_weights (or any safetensors file with the
  // same names, shapes and dtypes). A mismatch is refused before anything is
  // copied, with the first differences listed.
  void load_weights(const std::filesystem::path& path) {
    const auto file = io::safetensors_file::read(path);
    io::check_tensors_match(file, parameter_specs());
    for_each_parameter([&](const parameter_info& p) {
      const auto bytes = file.data(p.name);
      const auto view = stored(p, 0);
      for (std::size_t i = 0; i < p.size; ++i) std::memcpy(&view[i], bytes.data() + i * sizeof(float), sizeof(float));
    });
    replicas_stale_ = true;
  }

  // The names, shapes and dtypes of every parameter, in arena order.
  std::vector<io::tensor_spec> parameter_specs() const {
    std::vector<io::tensor_spec> specs;
    for_each_parameter([&](const parameter_info& p) { specs.push_back({p.name, "F32", p.shape}); });
    return specs;
  }

  // A parameter's values by name, e.g. "layers.1.kernel", in the tensor's
  // row-major order (the arena pads rows; the view hides that). Throws if absent.
  strided_view<float> parameter(std::string_view name) {
    replicas_stale_ = true;  // the caller may write through the view
    return stored(find_parameter(name), 0);
  }
  // The gradient of the last training step for a parameter.
  strided_view<const float> gradient(std::string_view name) const {
    const auto view = stored(find_parameter(name), memory_plan<Net, 0, 0>::gradients_offset);
    return {view.storage(), view.size(), view.row_length(), view.row_stride()};
  }

  // The whole parameter region (padding included), for bit-for-bit comparisons.
  std::span<const float> parameter_region() const {
    return {memory_.template at<float>(0), Net::parameter_floats};
  }

  // The same region for writing, e.g. a device's weights copied back; the
  // replicas take it before the next step.
  std::span<float> writable_parameter_region() {
    replicas_stale_ = true;
    return {memory_.template at<float>(0), Net::parameter_floats};
  }

  // Replica r's copy of the parameter region (mirrored<N>; replica 0 is the model's own).
  std::span<const float> replica_parameter_region(int r) const {
    if (r == 0) return parameter_region();
    return {secondaries_.at(static_cast<std::size_t>(r - 1))->memory.template at<float>(0), Net::parameter_floats};
  }

  // Loss scaling (mixed_float16 only): dynamic by default, as Keras's
  // LossScaleOptimizer (2^15, halved on a non-finite step, which is skipped,
  // doubled after 2000 finite ones), or fixed. Setting it starts afresh.
  void set_loss_scale(precision::dynamic_loss_scale options) {
    static_assert(loss_scaling, "set_loss_scale: only a float16 policy (mixed_float16) scales the loss");
    loss_scale_ = precision::loss_scale(options);
  }
  void set_loss_scale(precision::fixed_loss_scale options) {
    static_assert(loss_scaling, "set_loss_scale: only a float16 policy (mixed_float16) scales the loss");
    loss_scale_ = precision::loss_scale(options);
  }
  // The scale the next step multiplies the loss by, and how many steps were
  // skipped for non-finite gradients (1 and 0 without loss scaling).
  float loss_scale() const { return loss_scaling ? loss_scale_.scale() : 1.f; }
  std::int64_t skipped_steps() const { return loss_scaling ? loss_scale_.skipped_steps() : 0; }

  std::int64_t iterations() const { return training_.iterations; }
  // Whether this process prints and writes files: always, except on the
  // non-zero ranks of a multi_worker job.
  bool is_chief() const {
    if constexpr (requires { strategy_.is_chief(); })
      return strategy_.is_chief();
    else
      return true;
  }
  const Strategy& strategy() const { return strategy_; }
  std::uint64_t seed() const { return seed_; }
  const arena& memory() const { return memory_; }

 private:
  // mirrored<N>: replicas 1 .. N-1, each with its own arena, and the threads
  // that run them. Replica 0 is this model's own arena and run state.
  struct replica_state {
    arena memory;
    backend::cpu::context context;
    run_state run;
    std::shared_ptr<void> program;
    int program_batch = 0;
  };

  // fit_loop's steps on the CPU: each launch runs a whole step (batch k is
  // still in place: the loop reads batch k + 1 only after launch(k)).
  template <class Batch>
  struct fit_steps {
    model& m;
    const Batch* staged = nullptr;
    void stage(const Batch& batch, int) { staged = &batch; }
    void launch(int) { m.step_on(*staged); }
    void finish(int) {}
    void validate(const data::any_dataset<Batch>& data) { m.run_evaluation(m.template program_for<Batch::size>(), data); }
    float loss_scale() const { return m.loss_scale(); }
    std::int64_t skipped_steps() const { return m.skipped_steps(); }
  };

  std::size_t step_base() const {
    return memory_plan<Net, 0, 0>::slots_offset + static_cast<std::size_t>(training_.slots) * memory_plan<Net, 0, 0>::parameter_bytes;
  }

  // Sets the arena and the step program up for batch size N, once per size.
  template <int N>
  step_program<Net, N, cpu>& program_for() {
#if !TYPEFLOW_HAS_ONEDNN_CPP
    static_assert(N < 0, "model<Net, Policy, Strategy, cpu> cannot train or predict in a CUDA translation unit: "
                         "nvcc 13 cannot compile oneDNN's C++ header under C++20 (backend/cpu/context.hpp). "
                         "Run CPU models from a .cpp file, or use model<Net, Policy, single_device, cuda>");
#endif
    if (program_batch_ != N || !program_) {
      program_.reset();
      using plan = memory_plan<Net, N, 0>;
      const std::size_t total = step_base() + (plan::total_bytes - plan::activations_offset);
      memory_.reserve(total, step_base());
      program_ = std::make_shared<step_program<Net, N, cpu>>(memory_.data(), step_base(), context_, run_);
      program_batch_ = N;
    }
    return *std::static_pointer_cast<step_program<Net, N, cpu>>(program_);
  }

  // The decoder's program (batch 1) in the step region; a later fit or
  // evaluate sets its own program up again.
  step_program<typename Net::decoder, 1, cpu>& decoder_program() {
    constexpr int decoder_marker = -1;
    if (program_batch_ != decoder_marker || !program_) {
      program_.reset();
      using plan = memory_plan<typename Net::decoder, 1, 0>;
      const std::size_t total = step_base() + (plan::total_bytes - plan::activations_offset);
      memory_.reserve(total, step_base());
      program_ = std::make_shared<step_program<typename Net::decoder, 1, cpu>>(memory_.data(), step_base(), context_, run_);
      program_batch_ = decoder_marker;
    }
    return *std::static_pointer_cast<step_program<typename Net::decoder, 1, cpu>>(program_);
  }

  // A secondary replica's program: its arena holds weights, gradients (no
  // optimizer slots) and its own activations.
  template <int N>
  step_program<Net, N, cpu>& secondary_program_for(replica_state& replica) {
    if (replica.program_batch != N || !replica.program) {
      replica.program.reset();
      using plan = memory_plan<Net, N, 0>;
      replica.memory.reserve(plan::total_bytes, plan::activations_offset);
      replica.program = std::make_shared<step_program<Net, N, cpu>>(replica.memory.data(), plan::activations_offset,
                                                               replica.context, replica.run);
      replica.program_batch = N;
    }
    return *std::static_pointer_cast<step_program<Net, N, cpu>>(replica.program);
  }

  // One optimisation step on a full batch, on one replica or on all.
  template <class Batch>
  double step_on(const Batch& batch) {
    if constexpr (replica_count == 1)
      return train_step(program_for<Batch::size>(), batch);
    else
      return mirrored_train_step(batch);
  }

  template <class Program, class Batch>
  double train_step(Program& program, const Batch& batch) {
    std::memcpy(program.input(), batch.features.data(), batch.features.size() * sizeof(batch.features.data()[0]));
    run_.training = true;
    ++run_.step;
    program.forward();
    double loss = compute_loss(program, batch.labels.data(), batch.valid);
    scale_output_gradient(program);
    program.backward();
    loss += regularize_and_update(batch.valid);
    training_.loss_mean.update(loss, batch.valid);
    update_metrics(program, batch.labels.data(), batch.valid);
    return loss;
  }

  // mirrored<N>: each replica takes B / N consecutive samples of the batch.
  template <class Batch>
  double mirrored_train_step(const Batch& batch) {
    constexpr int shard = Batch::size / replica_count;
    static_assert(strategy_check<Strategy, global_batch<Batch::size>, Batch::size % replica_count == 0>::passed,
                  "mirrored<N>: the global batch must split into N equal shards; choose a batch size that N divides");
    using program_type = step_program<Net, shard, cpu>;
    using label_value = typename Batch::label_value;
    constexpr std::size_t features_per_shard = shard * Batch::features_type::size;
    constexpr std::size_t labels_per_shard = shard * Batch::label_type::size;
    synchronize_replicas();
    program_type* programs[replica_count];
    programs[0] = &program_for<shard>();
    for (int r = 1; r < replica_count; ++r) programs[r] = &secondary_program_for<shard>(*secondaries_[r - 1]);
    for (int r = 0; r < replica_count; ++r)
      std::memcpy(programs[r]->input(), batch.features.data() + r * features_per_shard, features_per_shard * sizeof(batch.features.data()[0]));

    struct job_context {
      model* self;
      program_type** programs;
      const label_value* labels;
      double losses[replica_count];
    } context{this, programs, batch.labels.data(), {}};
    pool_->run(
        [](void* c, int r) {
          auto& job = *static_cast<job_context*>(c);
          run_state& run = r == 0 ? job.self->run_ : job.self->secondaries_[r - 1]->run;
          run.training = true;
          ++run.step;
          job.programs[r]->forward();
          job.losses[r] = job.self->compute_loss(*job.programs[r], job.labels + r * labels_per_shard, shard);
          job.self->scale_output_gradient(*job.programs[r]);
          job.programs[r]->backward();
        },
        &context);

    all_reduce_gradients();
    double loss = 0;
    for (double l : context.losses) loss += l / replica_count;
    loss += regularize_and_update(Batch::size);
    training_.loss_mean.update(loss, Batch::size);
    for (int r = 0; r < replica_count; ++r) update_metrics(*programs[r], batch.labels.data() + r * labels_per_shard, shard);
    return loss;
  }

  // The mean of the replicas' gradients into replica 0's, summed in replica
  // order so that the result does not depend on which thread finished first.
  void all_reduce_gradients() {
    float* sum = memory_.template at<float>(memory_plan<Net, 0, 0>::gradients_offset);
    const float* others[replica_count > 1 ? replica_count - 1 : 1] = {};
    for (int r = 1; r < replica_count; ++r)
      others[r - 1] = secondaries_[r - 1]->memory.template at<float>(memory_plan<Net, 0, 0>::gradients_offset);
    constexpr float mean = 1.f / replica_count;
    backend::cpu::parallel_for(static_cast<std::ptrdiff_t>(Net::parameter_floats), [&](std::ptrdiff_t i) {
      float total = sum[i];
      for (int r = 0; r < replica_count - 1; ++r) total += others[r][i];
      sum[i] = total * mean;
    });
  }

  // Copies replica 0's weights to the others: every tensor after a change
  // from outside (initialisation, load_weights, parameter()), the trainable
  // ones after an update (each replica keeps its own statistics), and the
  // replicas' mean statistics when they are synchronised.
  void synchronize_replicas() {
    if (!replicas_stale_) return;
    for (auto& replica : secondaries_)
      std::memcpy(replica->memory.data(), memory_.data(), memory_plan<Net, 0, 0>::parameter_bytes);
    replicas_stale_ = false;
  }
  void broadcast_after_update() {
    for (const auto& t : parameter_tensors()) {
      if (t.kind == param_kind::statistic) continue;
      for (auto& replica : secondaries_)
        std::memcpy(replica->memory.template at<float>(0) + t.offset, memory_.template at<float>(0) + t.offset,
                    t.size * sizeof(float));
    }
    if constexpr (replica_count > 1 && Strategy::sync_statistics) {
      for (const auto& t : parameter_tensors()) {
        if (t.kind != param_kind::statistic) continue;
        float* primary = memory_.template at<float>(0) + t.offset;
        for (std::size_t i = 0; i < t.size; ++i) {
          float total = primary[i];
          for (auto& replica : secondaries_) total += replica->memory.template at<float>(0)[t.offset + i];
          primary[i] = total / replica_count;
        }
        for (auto& replica : secondaries_)
          std::memcpy(replica->memory.template at<float>(0) + t.offset, primary, t.size * sizeof(float));
      }
    }
  }

  // Regularizers, then the optimizer, on replica 0's (all-reduced) gradients;
  // returns the regularization penalty.
  double regularize_and_update(int samples) {
    // Across processes (multi_worker): the mean over every worker's gradient.
    if constexpr (requires { strategy_.all_reduce_mean(static_cast<float*>(nullptr), std::size_t{0}); })
      strategy_.all_reduce_mean(memory_.template at<float>(memory_plan<Net, 0, 0>::gradients_offset),
                                Net::parameter_floats);
    // mixed_float16: the gradients of the scaled loss, unscaled; a step with
    // an inf or a NaN among them changes no weight (after the all-reduce,
    // every replica and worker sees the same verdict).
    if constexpr (loss_scaling) {
      float* grads = memory_.template at<float>(memory_plan<Net, 0, 0>::gradients_offset);
      const bool finite = precision::unscale_all_finite(grads, Net::parameter_floats, loss_scale_.scale());
      if (!loss_scale_.after_step(finite)) {
        const double penalty = has_regularizers ? apply_regularizers(false) : 0.0;
        if (has_regularizers) training_.regularization_mean.update(penalty, samples);
        return penalty;
      }
    }
    double penalty = 0;
    if constexpr (has_regularizers) {
      penalty = apply_regularizers(true);
      training_.regularization_mean.update(penalty, samples);
    }
    optimizers::update_arguments arguments;
    arguments.weights = memory_.template at<float>(0);
    arguments.grads = memory_.template at<float>(memory_plan<Net, 0, 0>::gradients_offset);
    float* slot_pointers[training_state<Net>::max_slots] = {};
    for (int s = 0; s < training_.slots; ++s)
      slot_pointers[s] = memory_.template at<float>(memory_plan<Net, 0, 0>::slot_offset(s));
    arguments.slots = slot_pointers;
    arguments.floats = static_cast<std::ptrdiff_t>(Net::parameter_floats);
    arguments.tensors = parameter_tensors();
    arguments.iteration = training_.iterations + 1;
    if (training_.optimizer->update(arguments)) {
      ++training_.iterations;
      if constexpr (replica_count > 1) broadcast_after_update();
    }
    return penalty;
  }

  // The mean loss over the program's first `valid` samples; writes
  // d(loss)/d(output). labels: the program's batch of labels.
  template <class Program, class Label>
  double compute_loss(Program& program, const Label* labels, int valid) {
    const std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(Program::batch_size * rows_per_sample);
    const std::ptrdiff_t valid_rows = static_cast<std::ptrdiff_t>(valid * rows_per_sample);
    float* row_loss = program.row_losses();
    if constexpr (std::is_same_v<Label, std::int32_t>)
      training_.loss->sparse(program.output(), labels, rows, classes, valid_rows, program.output_gradient(), row_loss);
    else
      training_.loss->dense(program.output(), labels, rows, classes, valid_rows, program.output_gradient(), row_loss);
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
      constexpr std::size_t count = Program::batch_size * output_shape_type::size;
#pragma omp simd
      for (std::size_t i = 0; i < count; ++i) gradient[i] *= scale;
    }
  }

  template <class Program, class Label>
  void update_metrics(Program& program, const Label* labels, int valid) {
    const std::ptrdiff_t valid_rows = static_cast<std::ptrdiff_t>(valid * rows_per_sample);
    for (auto& m : training_.metrics) m->update(program.output(), labels, valid_rows, classes);
  }

  template <class Program, class Data>
  void run_evaluation(Program& program, const Data& data) {
    using batch_type = typename Data::element_type;
    training_.reset_metrics();
    batch_type batch;
    auto cursor = data.open(0);
    run_.training = false;
    const double penalty = has_regularizers ? apply_regularizers(false) : 0.0;
    while (cursor.next(batch)) {
      std::memcpy(program.input(), batch.features.data(), batch.features.size() * sizeof(batch.features.data()[0]));
      program.forward();
      training_.loss_mean.update(compute_loss(program, batch.labels.data(), batch.valid) + penalty, batch.valid);
      training_.regularization_mean.update(penalty, batch.valid);
      update_metrics(program, batch.labels.data(), batch.valid);
    }
  }

  using parameters = parameter_table<Net>;
  using parameter_info = typename parameters::info;
  static void for_each_parameter(auto&& f) { parameters::for_each(f); }
  static parameter_info find_parameter(std::string_view name) { return parameters::find(name); }
  // A parameter's elements in the region starting `region` bytes into the arena.
  strided_view<float> stored(const parameter_info& p, std::size_t region) const {
    float* data = const_cast<float*>(memory_.template at<float>(region + p.offset));
    return {data, p.size, p.row_length, p.row_stride};
  }

  // Whether any parameter carries a regularizer (decided at compile time).
  static constexpr bool has_regularizers = Net::has_regularizers;
  // The regularizers' total penalty; with add_gradients, also adds each
  // penalty's gradient to its parameter's gradient.
  double apply_regularizers(bool add_gradients) {
    return typeflow::apply_regularizers<Net>(memory_.data(), add_gradients);
  }
  void initialize_parameters() { typeflow::initialize_parameters<Net>(memory_.data(), seed_); }

  // Every parameter tensor's place and kind, in arena order (floats).
  static const std::vector<optimizers::parameter_tensor>& parameter_tensors() { return parameters::tensors(); }

  [[no_unique_address]] Strategy strategy_{};  // declared first: multi_worker starts MPI before anything else
  std::uint64_t seed_;
  arena memory_;
  backend::cpu::context context_;
  run_state run_;
  training_state<Net> training_;  // compile()'s optimizer, loss and metrics, counters, means
  precision::loss_scale loss_scale_{precision::dynamic_loss_scale{}};  // used under mixed_float16 only
  std::shared_ptr<void> program_;
  int program_batch_ = 0;

  // mirrored<N>: replicas 1 .. N-1 and the threads that run them.
  std::vector<std::unique_ptr<replica_state>> secondaries_;
  std::unique_ptr<replica_pool> pool_;
  bool replicas_stale_ = true;  // replica 0's weights changed outside a training step
};

}  // namespace typeflow

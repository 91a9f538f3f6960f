// model<Net, Policy, Strategy, Device>: Keras's Model, with the network as a type.
//
//   tf::model<mlp> model{/*seed=*/42};
//   model.summary();
//   model.compile(tf::optimizers::adam{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
//                 tf::metrics::accuracy{});
//   auto history = model.fit(train, {.epochs = 3, .validation_data = test});
//   model.evaluate(test); model.predict(test); model.save_weights("mlp.safetensors");
//
// Written once for every device and strategy: the checks a dataset must
// pass, compile, fit's loop, evaluate, predict, generate, the weights files
// and the parameter views. Where the step runs is the engine's
// (train/engine.hpp): the CPU's (train/cpu_engine.hpp) or a GPU's
// (train/cuda_engine.hpp, with typeflow/cuda.hpp).
#pragma once

#include <algorithm>
#include <array>
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

#include "typeflow/backend/device.hpp"
#include "typeflow/core/dtype.hpp"
#include "typeflow/core/random.hpp"
#include "typeflow/core/strided_view.hpp"
#include "typeflow/data/any_dataset.hpp"
#include "typeflow/data/example.hpp"
#include "typeflow/data/from_values.hpp"
#include "typeflow/distribute/mirrored.hpp"
#include "typeflow/distribute/rank_memory.hpp"
#include "typeflow/distribute/single_device.hpp"
#include "typeflow/distribute/strategy.hpp"
#include "typeflow/distribute/zero.hpp"
#include "typeflow/io/safetensors.hpp"
#include "typeflow/io/weights_options.hpp"
#include "typeflow/model/memory_plan.hpp"
#include "typeflow/model/network_io.hpp"
#include "typeflow/model/sequential.hpp"
#include "typeflow/model/summary.hpp"
#include "typeflow/precision/loss_scale.hpp"
#include "typeflow/precision/policy.hpp"
#include "typeflow/precision/storage.hpp"
#include "typeflow/io/checkpoint.hpp"
#include "typeflow/callbacks/callback.hpp"
#include "typeflow/train/checkpointing.hpp"
#include "typeflow/train/row_weights.hpp"
#include "typeflow/train/validation_split.hpp"
#include "typeflow/train/compile_holders.hpp"
#include "typeflow/train/device_budget.hpp"
#include "typeflow/train/cpu_engine.hpp"
#include "typeflow/train/engine.hpp"
#include "typeflow/train/fit_loop.hpp"
#include "typeflow/train/generation.hpp"
#include "typeflow/callbacks/history.hpp"
#include "typeflow/backend/cpu/peak_flops.hpp"
#include "typeflow/train/parameter_table.hpp"
#include "typeflow/callbacks/progress_bar.hpp"
#include "typeflow/train/training_state.hpp"

namespace typeflow {


template <class Network, class Policy = float32, class Strategy = single_device, class Device = cpu,
          class Budget = no_device_budget>
class model {
  static_assert(is_sequential_v<Network>, "model<Net>: Net must be a sequential<input<...>, layers...> or a functional<input<...>, nodes...>");
  static_assert(is_policy_v<typename detail::policy_of<Policy>::type>,
                "model<Net, Policy>: Policy is float32, mixed_float16, mixed_bfloat16 or a policy<Param, Compute, Output>");
  static_assert(std::is_same_v<Device, cpu> || std::is_same_v<Device, cuda>,
                "model<Net, Policy, Strategy, Device>: Device is cpu or cuda");
  static_assert(is_device_budget_v<Budget>,
                "model<Net, Policy, Strategy, Device, Budget>: Budget is device_budget<Bytes> (train/device_budget.hpp)");
  static_assert(strategy<Strategy>,
                "model<Net, Policy, Strategy, Device>: Strategy is single_device, mirrored<N> or multi_worker, or "
                "a type with their facts and collectives (distribute/strategy.hpp lists them)");
  static_assert(distribute::zero_runs<Strategy, Device>(), "zero<Stage, Strategy>: see the error above");

 public:
  using policy_type = typename detail::policy_of<Policy>::type;

 private:
  // The network bound under the policy: every fact below is read from it.
  using Net = typename Network::template under<policy_type, Device::gpu>;
  // (A GPU's bf16 logits are read by the cross-entropy in float32 arithmetic: layers/embedding.hpp.)
  static_assert(!precision::is_16bit_v<typename detail::loss_input_dtype<Net>::type> || Net::bf16_logits,
                "model<Net, mixed policy>: the loss would receive 16-bit outputs, which lose precision "
                "(and overflow in float16). Compute the output layer in float32, as Keras's dtype=\"float32\": "
                "e.g. dense<10, float32>, or end with softmax, which always computes in float32");

  static_assert(std::is_same_v<typename Net::input_dtype, float32> || std::is_same_v<typename Net::input_dtype, int32>,
                "model<Net>: the network's input must be float32 features or int32 token ids");
  using engine_type = engine<Net, policy_type, Strategy, Device>;

 public:
  using network = Network;
  using bound_network = Net;
  static constexpr bool loss_scaling = policy_type::loss_scaling;
  using output_shape_type = typename Net::output_shape_type;
  static constexpr int classes = training_state<Net>::classes;
  static constexpr std::size_t rows_per_sample = training_state<Net>::rows_per_sample;
  static constexpr std::size_t parameter_count = Net::parameter_count;
  static constexpr int replica_count = Strategy::replicas;

  // Initialises every parameter from the seed: the same seed gives the same
  // weights, bit for bit, on every device, and (with a seeded pipeline) the
  // same training run. The device's own arguments follow the seed (cuda: the
  // first GPU's index).
  template <class... DeviceArguments>
  explicit model(std::uint64_t seed = 0, DeviceArguments... device_arguments)
      : seed_(seed), engine_(training_, seed, device_arguments...) {}

  model(const model&) = delete;
  model& operator=(const model&) = delete;

  // Keras's table: layer, output shape, parameter count, totals, nested
  // blocks expanded; within line_length columns (0: the terminal's width).
  // Under zero<k>, then, what each replica holds (distribute/rank_memory.hpp).
  void summary(std::FILE* out = stdout, std::size_t line_length = 0) const {
    print_summary<Net>(out, line_length);
    if constexpr (is_zero_v<Strategy>) {
      const std::string per_replica =
          distribute::rank_memory_text<Net, Strategy, Device>(training_.optimizer ? training_.slots : -1,
                                                              shard_count());
      std::fwrite(per_replica.data(), 1, per_replica.size(), out);
    }
  }
  // The same table as text (0: no width limit), e.g. for a report.
  static std::string summary_text(std::size_t line_length = 0) {
    std::string text = typeflow::summary_text<Net>(line_length);
    if constexpr (is_zero_v<Strategy>)
      text += distribute::rank_memory_text<Net, Strategy, Device>(
          -1, Strategy::across_processes ? 0 : Strategy::replicas);
    return text;
  }
  // What a report lists about this model and its training, as (name, value)
  // rows: the network's compile-time facts, the policy, strategy and device,
  // and what compile() and the last fit were given.
  std::vector<std::pair<std::string, std::string>> settings() const {
    std::vector<std::pair<std::string, std::string>> rows{
        {"parameters", detail::with_thousands(Net::parameter_count)},
        {"forward FLOPs per sample", detail::with_thousands(Net::flops_per_sample)},
        {"policy", policy_name<policy_type>()},
        {"strategy", strategy_name<Strategy>()},
        {"device", std::string(Device::name)},
        {"seed", std::to_string(seed_)}};
    if (training_.optimizer) rows.emplace_back("optimizer", std::string(training_.optimizer->name()));
    if (training_.loss) rows.emplace_back("loss", std::string(training_.loss->name()));
    std::string metric_names;
    for (const auto& metric : training_.metrics) metric_names += (metric_names.empty() ? "" : ", ") + std::string(metric->name());
    if (!metric_names.empty()) rows.emplace_back("metrics", metric_names);
    if (trained_batch_size_ > 0) rows.emplace_back("batch size", std::to_string(trained_batch_size_));
    if constexpr (is_zero_v<Strategy>)
      for (auto& [what, value] :
           distribute::rank_memory_rows<Net, Strategy, Device>(training_.optimizer ? training_.slots : -1,
                                                               shard_count()))
        rows.emplace_back(what + " per replica", std::move(value));
    return rows;
  }

  template <optimizers::optimizer Optimizer, losses::loss Loss, detail::metric... Metrics>
  void compile(Optimizer optimizer, Loss loss, Metrics... metrics) {
    engine_.check_compile(optimizer, loss);
    training_.compile(optimizer, std::move(loss), std::move(metrics)...);
    engine_.compiled(training_.template compiled_optimizer<Optimizer>());  // fresh optimizer state; the weights stay
  }

  // A loss per output, with its weight, and metrics per output, for a
  // network with several outputs (train/output_losses.hpp):
  //   compile(optimizer, tf::on_output<"priority">(loss, 1.0), tf::on_output<"department">(loss, 0.2),
  //           tf::on_output<"department">(tf::metrics::accuracy{}));
  // An on_output naming an output the network lacks is a compile-time error.
  template <optimizers::optimizer Optimizer, class First, class... Rest>
    requires is_on_output_v<First>
  void compile(Optimizer optimizer, First first, Rest... rest) {
    if constexpr (network_io<Net>::packed_outputs)
      engine_.check_compile_outputs(optimizer, first, rest...);
    else
      engine_.check_compile(optimizer, first.value);
    training_.compile(optimizer, std::move(first), std::move(rest)...);
    engine_.compiled(training_.template compiled_optimizer<Optimizer>());
  }

  // Trains for options.epochs passes over `train`, a batched dataset whose
  // batch size N is part of its type. A last partial batch trains, as in
  // Keras (train/training_step.hpp).
  template <data::batched_dataset Dataset>
  history fit(const Dataset& train, fit_options<typename Dataset::element_type> options = {}) {
    using batch_type = typename Dataset::element_type;
    training_.template check_labelled<batch_type>("fit");
    check_batch_size<batch_type::size>("fit");
    check_budget<batch_type::size>(training_.slots, "fit");
    auto steps = engine_.template steps<batch_type>();
    if constexpr (std::is_same_v<Device, cpu>)
      if (options.peak_flops == 0) options.peak_flops = cpu_peak_flops();  // measured once per process
    // class_weight holds for this fit only.
    training_.class_weights = class_weight_table(options.class_weight, classes);
    struct forget_weights {
      training_state<Net>& t;
      ~forget_weights() { t.class_weights.clear(); }
    } forget{training_};
    access access_for_callbacks{*this};
    if (options.validation_split != 0 && !options.validation_data) {  // Keras: validation_data overrides it
      auto [training, validation] = split_for_validation(train, options.validation_split);
      options.validation_data = std::move(validation);
      return fit_loop<Net, loss_scaling>(training_, steps, training, std::move(options), access_for_callbacks);
    }
    return fit_loop<Net, loss_scaling>(training_, steps, train, std::move(options), access_for_callbacks);
  }

  // One optimisation step on one batch, as Keras's train_on_batch (a
  // partial one where fit trains it): returns the batch's mean loss. Metrics accumulate until the next fit,
  // evaluate or reset.
  template <int N, class Features, class Label>
  double train_on_batch(const data::batch_of<N, Features, Label>& batch) {
    using batch_type = data::batch_of<N, Features, Label>;
    training_.template check_labelled<batch_type>("train_on_batch");
    check_batch_size<N>("train_on_batch");
    check_budget<N>(training_.slots, "train_on_batch");
    auto steps = engine_.template steps<batch_type>();
    training_state<Net>::check_trainable(batch);
    try {
      steps.stage(batch, 0);
      steps.launch(0);
      return steps.finish(0);
    } catch (const non_finite_error& e) {
      throw non_finite_error("train_on_batch (update " + std::to_string(training_.iterations + 1) + "): " + e.what() +
                                 "; the update was not applied",
                             e.tensor());
    }
  }

  // Keras's test_on_batch: the loss and metrics over one batch's valid
  // rows, in inference mode; the metrics start afresh, as evaluate's do.
  template <int N, class Features, class Label>
  evaluation test_on_batch(const data::batch_of<N, Features, Label>& batch) {
    return evaluate(data::from_values(std::vector<data::batch_of<N, Features, Label>>{batch}));
  }

  // Keras's predict_on_batch: the outputs for one batch's valid rows, as
  // predict gives them.
  template <int N, class Features, class Label>
  auto predict_on_batch(const data::batch_of<N, Features, Label>& batch) {
    return predict(data::from_values(std::vector<data::batch_of<N, Features, Label>>{batch}));
  }

  // The loss and metrics over every sample of `data` (the last batch is
  // padded and masked), in inference mode. callbacks: Keras's evaluate(...,
  // callbacks=...): on_test_begin, each batch's on_test_batch_begin and
  // on_test_batch_end, on_test_end.
  template <data::batched_dataset Dataset>
  evaluation evaluate(const Dataset& data, const std::vector<callback*>& callbacks = {}) {
    using batch_type = typename Dataset::element_type;
    training_.template check_labelled<batch_type>("evaluate");
    check_budget<batch_type::size>(0, "evaluate");
    access access_for_callbacks{*this};
    const lend_model lent{callbacks, &access_for_callbacks};
    for (auto* c : callbacks) c->on_test_begin();
    engine_.evaluate(data, callbacks);
    // No sample: no mean to report (it read as loss 0, a perfect model), as
    // Keras refuses empty input.
    if (!(training_.loss_mean.weight > 0))
      throw std::invalid_argument("evaluate: the dataset gave no samples, so there is no loss or metric to report");
    if (!callbacks.empty()) {
      logs results;
      training_.fill_logs(results, "");
      for (auto* c : callbacks) c->on_test_end(results);
    }
    return training_.results();
  }

  // The model's outputs for every sample of `data`: a host_tensor of shape
  // (samples, output shape...), row-major; labels, if any, are ignored. A
  // network with several outputs gives each by its name (predictions).
  // callbacks: Keras's predict(..., callbacks=...): on_predict_begin, each
  // batch's on_predict_batch_begin and on_predict_batch_end, on_predict_end.
  template <data::batched_dataset Dataset>
  auto predict(const Dataset& data, const std::vector<callback*>& callbacks = {}) {
    training_state<Net>::template check_batch_type<typename Dataset::element_type>();
    check_budget<Dataset::element_type::size>(0, "predict");
    access access_for_callbacks{*this};
    const lend_model lent{callbacks, &access_for_callbacks};
    for (auto* c : callbacks) c->on_predict_begin();
    std::vector<float> outputs = engine_.predict(data, callbacks);
    for (auto* c : callbacks) c->on_predict_end();
    if constexpr (network_io<Net>::packed_outputs) {
      return unpack_outputs<Net>(outputs);
    } else {
      const std::size_t samples = outputs.size() / Net::output_shape_type::size;
      return host_tensor(std::move(outputs), with_samples<typename Net::output_shape_type>(samples));
    }
  }

  // Continues `prompt` (token ids) by n tokens sampled from the model, and
  // returns the n new ids, through the network's decoder with its key/value
  // caches (train/generation.hpp says how the context is kept).
  std::vector<std::int32_t> generate(std::span<const std::int32_t> prompt, int n, generate_options options = {}) {
    static_assert(std::is_same_v<typename Net::input_dtype, int32> && Net::input_shape_type::rank == 1,
                  "generate: the network must take a sequence of int32 token ids, typed_input<int32, T>");
    static_assert(Net::decoder::parameter_floats == Net::parameter_floats,
                  "generate: a layer's parameters depend on the sequence length, so the decoder cannot share them");
    check_generate_arguments(prompt, n, options, classes);
    return engine_.generate(prompt, n, options);
  }

  // Parameters as safetensors, named "layers.<position>.<name>" with their
  // shapes, e.g. layers.1.kernel (784, 512). Written to a temporary file and
  // renamed, so a crash never leaves a partial file under `path`.
  void save_weights(const std::filesystem::path& path) const {
    const io::save_weights_options typeflow_names;
    save_weights(path, typeflow_names);
  }

  // The same for another reader (io/weights_options.hpp): each tensor under
  // options.rename's name (one renamed to "" is left out), with
  // options.metadata; e.g. Hugging Face's GPT-2 layout, io/hf_gpt2.hpp.
  void save_weights(const std::filesystem::path& path, const io::save_weights_options& options) const {
    // Every worker holds the same weights; the chief writes them. (Under
    // zero<3, multi_worker> each holds a shard: gathering them whole is a
    // collective, which every worker joins.)
    const std::span<const float> region = engine_.parameters();
    if (!is_chief()) return;
    std::vector<std::vector<float>> values;  // rows unpadded, as the file wants them
    std::vector<io::tensor_to_write> tensors;
    parameters::for_each([&](const parameter_info& p) {
      if (options.merge_lora && p.lora_scale != 0.f) return;  // folded into its kernel
      std::string name = options.rename ? options.rename(p.name) : p.name;
      if (name.empty()) return;
      values.push_back(options.merge_lora ? parameters::merged_values(p, region.data())
                                          : parameters::values_of(p, region.data()));
      tensors.push_back({std::move(name), "F32", p.shape, values.back().data(), p.size * sizeof(float)});
    });
    io::write_safetensors(path, tensors, options.metadata);
  }

  // Reads weights saved by save_weights (or any safetensors file with the
  // same names, shapes and dtypes). A mismatch is refused before anything is
  // copied, with the first differences listed.
  void load_weights(const std::filesystem::path& path) {
    const auto file = io::safetensors_file::read(path);
    io::check_tensors_match(file, parameter_specs());
    const std::span<float> region = engine_.writable_parameters();
    parameters::for_each([&](const parameter_info& p) {
      const auto bytes = file.data(p.name);
      const auto view = parameters::stored(p, region.data());
      for (std::size_t i = 0; i < p.size; ++i) std::memcpy(&view[i], bytes.data() + i * sizeof(float), sizeof(float));
    });
  }

  // Reads weights that another model wrote (io/weights_options.hpp): the
  // file's names through options.rename, then matched to the model's;
  // allow_missing keeps the values of model tensors absent from the file (a
  // new head), allow_unexpected leaves file tensors the model lacks unread,
  // skip_mismatch (Keras's) keeps the model's values where a shape differs,
  // with a warning. F16, BF16 and F64 tensors are converted to float32.
  // Anything else is refused before anything is copied, naming the file,
  // the unmatched names on both sides and the first shape that differs.
  // Returns what was loaded, skipped, missing and not read.
  io::load_weights_report load_weights(const std::filesystem::path& path, const io::load_weights_options& options) {
    const auto file = io::safetensors_file::read(path);
    io::weights_load_plan plan = io::plan_weights_load(file, parameter_specs(), options);
    const std::span<float> region = engine_.writable_parameters();
    for (const io::weights_copy& c : plan.copies) {
      const std::vector<float> values = io::read_float32(file, c.file_name);
      std::copy(values.begin(), values.end(), parameters::stored(parameters::find(c.model_name), region.data()).begin());
    }
    return std::move(plan.report);
  }

  // A checkpoint of everything training needs to continue as if it had not
  // stopped: the weights, the optimizer's slots and counters (accumulate<K>'s
  // micro-batches included) and its learning rate when a callback set it,
  // the epochs begun (the shuffle key), the seed and dropout counter, the
  // loss-scale state; written during fit (by a callback), also where fit
  // stands (epoch, batch), the epoch's running means, the History so far and
  // each callback's state (fit_snapshot.hpp). Written atomically into
  // dir/ckpt-<iterations>/ (io/checkpoint.hpp), keeping the newest
  // options.keep; only the chief writes, except that under zero<k> each
  // rank writes its shards of the optimizer's slots, and under zero<3> of
  // the weights (every worker calls it then: see save_sharded_checkpoint).
  // Returns the checkpoint's directory.
  std::filesystem::path save_checkpoint(const std::filesystem::path& dir, checkpoint_options options = {}) {
    training_.require_compiled("save_checkpoint");
    if constexpr (is_zero_v<Strategy>) {
      return save_sharded_checkpoint(dir, options);
    } else {
      if (!is_chief()) return dir / io::detail::checkpoint_name(training_.iterations);
      return write_checkpoint_here(dir, options, training_.slots, nullptr);
    }
  }

  // Continues from the newest checkpoint in dir (or from dir, one
  // checkpoint's directory). compile() must have run, with the optimizer the
  // checkpoint was written with. A checkpoint of another network, policy,
  // strategy or optimizer is refused before anything changes, naming what
  // differs; the next fit must train at the batch size the checkpoint did.
  // Every check (identity, tensors, checksums, counters' ranges, what the
  // optimizer can take) comes before the first change. One written during
  // fit makes the next fit continue that fit: at its
  // epoch and batch, with its History and callbacks' state (Keras's
  // BackupAndRestore; fit's `epochs` is the total of the run).
  void load_checkpoint(const std::filesystem::path& dir) {
    training_.require_compiled("load_checkpoint");
    std::optional<io::checkpoint_read> read;
    checkpoint_counters c;
    std::optional<checkpoint_slots> slots;
    // Every tensor there and of the right size (the slots' files this rank
    // reads: all of them, or under zero<k> its shards'), and what this
    // model's optimizer can take, before anything is copied; across
    // workers, on every worker before any changes.
    on_every_rank("load_checkpoint", [&] {
      read.emplace(io::read_checkpoint(dir));
      c = read_checkpoint_manifest(read->manifest, read->path, checkpoint_id(), training_.optimizer->name(),
                                   training_.slots, &read->tensors);
      check_checkpoint_tensors<Net>(*read, training_.slots, trainable_statistics());
      check_checkpoint_optimizer(c, *training_.optimizer, read->path);
      slots.emplace(*read);
      slots->need_parameters();  // a zero<3> checkpoint's weights: every shard file's
      if constexpr (is_zero_v<Strategy>) {
        const std::vector<std::size_t> cut = engine_.shard_cut();
        for (const int i : engine_.held_shards()) slots->need(cut[i], cut[i + 1]);
      } else {
        slots->need(0, Net::trainable_floats);
      }
    });
    if (c.learning_rate) set_learning_rate(*c.learning_rate);
    const std::vector<float> weights = slots->parameters();
    std::ranges::copy(weights, engine_.writable_parameters().begin());
    if constexpr (is_zero_v<Strategy>) {  // each shard from the files that hold it
      const std::vector<std::size_t> cut = engine_.shard_cut();
      for (const int i : engine_.held_shards())
        for (int s = 0; s < training_.slots; ++s) slots->copy(s, cut[i], cut[i + 1], engine_.slot_shard(i, s).data());
    } else {
      std::vector<float> slot(Net::trainable_floats);
      for (int s = 0; s < training_.slots; ++s) {
        slots->copy(s, 0, slot.size(), slot.data());
        engine_.set_slot_values(s, slot);
      }
    }
    training_.iterations = c.iterations;
    training_.optimizer->restore_pending_micro_batches(c.pending_micro_batches);
    training_.epoch_counter = c.epochs_begun;
    training_.resume = c.fit;
    training_.ema_in_weights = c.ema_in_weights;
    engine_.restore(c.engine);
    seed_ = c.engine.seed;
    trained_batch_size_ = c.batch_size;
    resumed_ = c.batch_size != 0;
  }

  // The names, shapes and dtypes of every parameter, in arena order.
  std::vector<io::tensor_spec> parameter_specs() const {
    std::vector<io::tensor_spec> specs;
    parameters::for_each([&](const parameter_info& p) { specs.push_back({p.name, "F32", p.shape}); });
    return specs;
  }

  // A parameter's values with its LoRA adapter folded in (a kernel of a
  // layer with lora<>: W + Alpha / Rank · A · B), else its values: what a
  // model of the same layers without lora<> holds there (merge_lora).
  std::vector<float> merged_parameter(std::string_view name) const {
    return parameters::merged_values(parameters::find(name), engine_.parameters().data());
  }

  // A parameter's values by name, e.g. "layers.1.kernel", in the tensor's
  // row-major order (the arena pads rows; the view hides that). Throws if
  // absent. Writes through the view reach every replica and device before
  // the next step.
  strided_view<float> parameter(std::string_view name) {
    const parameter_info p = parameters::find(name);
    return parameters::stored(p, engine_.writable_parameters().data());
  }
  // The gradient of the last training step for a parameter (a frozen one has none).
  strided_view<const float> gradient(std::string_view name) const {
    const parameter_info p = parameters::find(name);
    if (!p.trainable)
      throw std::invalid_argument("gradient: " + p.name +
                                  " is frozen (inside frozen<...>, or a kernel with lora<>): it has no gradient");
    const auto view = parameters::stored(p, engine_.gradients().data());
    return {view.storage(), view.size(), view.row_length(), view.row_stride()};
  }

  // Keras's get_weights: every parameter tensor, in the model's order, with
  // its name, shape and values (the arena's row padding left out).
  std::vector<weight_tensor> get_weights() const {
    std::vector<weight_tensor> tensors;
    const float* region = engine_.parameters().data();
    parameters::for_each([&](const parameter_info& p) {
      const auto view = parameters::stored(p, region);
      tensors.push_back({p.name, p.shape, std::vector<float>(view.begin(), view.end())});
    });
    return tensors;
  }
  // Keras's set_weights: as many tensors as get_weights gives, in its order,
  // each with as many values (a name or shape given must be the model's).
  // Everything is checked before anything is written.
  void set_weights(const std::vector<weight_tensor>& tensors) {
    std::vector<parameter_info> own;
    parameters::for_each([&](const parameter_info& p) { own.push_back(p); });
    if (tensors.size() != own.size())
      throw std::invalid_argument("set_weights: " + std::to_string(tensors.size()) + " tensors for a model of " +
                                  std::to_string(own.size()) + " (get_weights() gives them in order)");
    for (std::size_t i = 0; i < own.size(); ++i) {
      const weight_tensor& t = tensors[i];
      const std::string where = "set_weights: tensor " + std::to_string(i) + " (" + own[i].name + ")";
      if (!t.name.empty() && t.name != own[i].name)
        throw std::invalid_argument(where + " is named " + t.name + " here");
      if (!t.shape.empty() && t.shape != own[i].shape)
        throw std::invalid_argument(where + " has shape " + io::shape_string(t.shape) + ", the model's is " +
                                    io::shape_string(own[i].shape));
      if (t.values.size() != own[i].size)
        throw std::invalid_argument(where + " holds " + std::to_string(t.values.size()) + " values; its shape " +
                                    io::shape_string(own[i].shape) + " has " + std::to_string(own[i].size));
    }
    float* region = engine_.writable_parameters().data();
    for (std::size_t i = 0; i < own.size(); ++i) {
      auto view = parameters::stored(own[i], region);
      std::copy(tensors[i].values.begin(), tensors[i].values.end(), view.begin());
    }
  }

  // The whole parameter region (padding included), for bit-for-bit comparisons.
  std::span<const float> parameter_region() const { return engine_.parameters(); }
  // Replica r's copy of the parameter region (mirrored<N>: all equal after a step).
  decltype(auto) replica_parameter_region(int r) const { return engine_.replica_parameter_region(r); }

  // Loss scaling (mixed_float16 only): dynamic by default, as Keras's
  // LossScaleOptimizer (2^15, halved on a non-finite step, which is skipped,
  // doubled after 2000 finite ones), or fixed. Setting it starts afresh.
  void set_loss_scale(precision::dynamic_loss_scale options) {
    static_assert(loss_scaling, "set_loss_scale: only a float16 policy (mixed_float16) scales the loss");
    engine_.set_loss_scale(options);
  }
  void set_loss_scale(precision::fixed_loss_scale options) {
    static_assert(loss_scaling, "set_loss_scale: only a float16 policy (mixed_float16) scales the loss");
    engine_.set_loss_scale(options);
  }
  // The scale the next step multiplies the loss by, and how many steps were
  // skipped for non-finite gradients (1 and 0 without loss scaling).
  float loss_scale() const { return engine_.loss_scale(); }
  std::int64_t skipped_steps() const { return engine_.skipped_steps(); }

  // Keras 3's optimizer EMA (use_ema, optimizers/ema.hpp): exchanges the
  // trainable weights with their moving average, so that evaluate, predict
  // or save_weights use the average; a second call puts them back.
  // (callbacks::swap_ema_weights does it around fit's validation.)
  void swap_ema_weights() {
    training_.require_compiled("swap_ema_weights");
    const std::optional<int> slot = training_.optimizer->ema_slot();
    if (!slot) throw std::logic_error("swap_ema_weights: the optimizer was compiled without use_ema = true");
    if constexpr (slot_in_place) {
      optimizers::swap_with_average(engine_.writable_parameters().data(), engine_.slot_region(*slot).data(),
                                    parameter_table<Net>::tensors());
    } else {  // through whole copies (a GPU's, or zero<k>'s shards), which go back before the next step
      const std::span<float> weights = engine_.writable_parameters();
      std::vector<float> average = held_slot(*slot);
      optimizers::swap_with_average(weights.data(), average.data(), parameter_table<Net>::tensors());
      engine_.set_slot_values(*slot, average);
    }
    training_.ema_in_weights = !training_.ema_in_weights;
  }
  // Whether the average is in the weights now (an odd number of swaps).
  bool ema_weights_in_model() const { return training_.ema_in_weights; }
  // Keras's optimizer.finalize_variable_values, which fit calls at its end:
  // with use_ema, the weights become the moving average (and stay it).
  void finalize_variable_values() {
    if (!training_.optimizer) return;
    const std::optional<int> slot = training_.optimizer->ema_slot();
    if (!slot) return;
    float* weights = engine_.writable_parameters().data();
    if constexpr (slot_in_place) {
      float* average = engine_.slot_region(*slot).data();
      if (training_.ema_in_weights)  // swapped in: the slot holds the raw weights, which go
        optimizers::copy_trainable(weights, average, parameter_table<Net>::tensors());
      else
        optimizers::copy_trainable(average, weights, parameter_table<Net>::tensors());
    } else {  // through the host copies, as swap_ema_weights
      std::vector<float> average = held_slot(*slot);
      if (training_.ema_in_weights) {
        optimizers::copy_trainable(weights, average.data(), parameter_table<Net>::tensors());
        engine_.set_slot_values(*slot, average);
      } else {
        optimizers::copy_trainable(average.data(), weights, parameter_table<Net>::tensors());
      }
    }
    training_.ema_in_weights = false;
  }


  std::int64_t iterations() const { return training_.iterations; }
  // Keras's model.optimizer.learning_rate: the rate of the next update.
  double learning_rate() const {
    training_.require_compiled("learning_rate");
    return training_.optimizer->learning_rate(training_.iterations + 1);
  }
  // Replaces the optimizer's learning rate by a constant (reduce_lr_on_plateau
  // and learning_rate_scheduler do). Refused, as Keras refuses it, when
  // compile() was given a schedule; a checkpoint keeps the new rate.
  void set_learning_rate(double rate) {
    training_.require_compiled("set_learning_rate");
    training_.optimizer->set_learning_rate(rate);  // the one copy: every engine reads it
  }
  // Whether this process prints and writes files: always, except on the
  // non-zero ranks of a multi_worker job.
  bool is_chief() const { return engine_.is_chief(); }
  const Strategy& strategy() const { return engine_.strategy(); }
  std::uint64_t seed() const { return seed_; }
  // Replica r's arena in bytes (0 before its first step; on a GPU, device
  // memory). Under mirrored<N> replica 0 holds the optimizer's slots, under
  // zero<k> each replica its shard (distribute/rank_memory.hpp plans them).
  std::size_t arena_bytes(int replica = 0) const { return engine_.arena_bytes(replica); }
  // Replica r's weights, gradients and optimizer slots on the CPU: the bytes
  // held in memory now (whole pages; less than their region under zero<3>,
  // whose freed pages hold none), and the most held during the steps since
  // track_state_peaks() (zero<3>'s gathers; otherwise the bytes now).
  std::size_t resident_state_bytes(int replica = 0) const
    requires std::is_same_v<Device, cpu>
  {
    return engine_.resident_state_bytes(replica);
  }
  void track_state_peaks(bool on = true)
    requires std::is_same_v<Device, cpu>
  {
    engine_.track_state_peaks(on);
  }
  std::size_t peak_state_bytes(int replica = 0) const
    requires std::is_same_v<Device, cpu>
  {
    return engine_.peak_state_bytes(replica);
  }
  const arena& memory() const
    requires std::is_same_v<Device, cpu>
  {
    return engine_.memory();
  }
  // The bf16 copies of weights its native bf16 products keep from step to
  // step (precision/weight_copies.hpp): none without AVX512-BF16.
  const precision::weight_copies& weight_copies() const
    requires std::is_same_v<Device, cpu>
  {
    return engine_.weight_copies();
  }
  // The GPU replica r runs on.
  int device(int r = 0) const
    requires std::is_same_v<Device, cuda>
  {
    return engine_.device(r);
  }

 private:
  // A copy of optimizer slot s as the engine holds it (a GPU's, through the host).
  // Whether an optimizer slot is one region in host memory (the CPU's, not
  // sharded by zero<k>); else held_slot copies it and set_slot_values puts it back.
  static constexpr bool slot_in_place = std::is_same_v<Device, cpu> && !is_zero_v<Strategy>;
  // zero<k>'s shards: its replicas, or across processes the job's workers.
  int shard_count() const {
    if constexpr (is_zero_v<Strategy> && Strategy::across_processes)
      return strategy().inner.size();
    else
      return Strategy::replicas;
  }
  // Across processes: each value of `l` becomes its mean over the job's
  // workers (model_access::mean_over_workers), through the strategy's
  // all-reduce of doubles (multi_worker's, zero<k, multi_worker>'s inner).
  void mean_over_workers(logs& l) const {
    std::array<double, logs::capacity> values{};
    for (std::size_t i = 0; i < l.count; ++i) values[i] = l.entries[i].value;
    mean_over_workers(values.data(), l.count, "the epoch's logs");
    for (std::size_t i = 0; i < l.count; ++i) l.entries[i].value = values[i];
  }
  // Whether any worker's flag is set (model_access::stop_agreed); elsewhere the flag.
  bool any_worker(bool flag) const {
    double share = flag ? 1.0 : 0.0;
    mean_over_workers(&share, 1, "the workers' requests to stop");
    return share > 0.0;
  }
  // values[0, n) become their means over the job's workers (what names the
  // collective in an error); elsewhere they stay.
  void mean_over_workers(double* values, std::size_t n, const char* what) const {
    if constexpr (Strategy::across_processes) {
      const auto& workers = [&]() -> const auto& {
        if constexpr (is_zero_v<Strategy>)
          return strategy().inner;
        else
          return strategy();
      }();
      // multi_worker's reduction aside from the steps' collectives, so that
      // a worker whose epoch ended early waits to the deadline there.
      constexpr bool aside = requires(double* d) { workers.all_reduce_mean_aside(d, std::size_t{1}, "logs"); };
      if constexpr (aside)
        workers.all_reduce_mean_aside(values, n, what);
      else if constexpr (requires(double* d) { workers.all_reduce_mean(d, std::size_t{1}, "logs"); })
        workers.all_reduce_mean(values, n, what);
    } else {
      (void)values, (void)n, (void)what;
    }
  }
  std::vector<float> held_slot(int s) {
    const auto held = engine_.slot_values(s);
    return std::vector<float>(held.begin(), held.end());
  }
  // What fit's callbacks may ask of this model (callbacks/callback.hpp).
  // evaluate's and predict's callbacks see this model while it runs; then
  // each gets back the model it had (a fit's, when called inside one).
  struct lend_model {
    std::vector<std::pair<callback*, model_access*>> before;
    lend_model(const std::vector<callback*>& callbacks, model_access* m) {
      for (auto* c : callbacks) {
        before.emplace_back(c, c->model());
        c->set_model(m);
      }
    }
    lend_model(const lend_model&) = delete;
    lend_model& operator=(const lend_model&) = delete;
    ~lend_model() {
      for (auto& [c, m] : before) c->set_model(m);
    }
  };

  struct access final : model_access {
    model& m;
    bool stop = false;
    explicit access(model& owner) : m(owner) {}
    void stop_training() override { stop = true; }
    bool stop_requested() const override { return stop; }
    bool stop_agreed() override {
      stop = m.any_worker(stop);
      return stop;
    }
    std::vector<float> get_weight_region() const override {
      const auto region = m.parameter_region();
      return {region.begin(), region.end()};
    }
    void set_weight_region(std::span<const float> region) override {
      const auto into = m.engine_.writable_parameters();
      if (region.size() != into.size())
        throw std::invalid_argument("set_weight_region: " + std::to_string(region.size()) +
                                    " floats for a parameter region of " + std::to_string(into.size()));
      std::copy(region.begin(), region.end(), into.begin());
    }
    std::vector<weight_tensor> get_weights() const override { return m.get_weights(); }
    void set_weights(const std::vector<weight_tensor>& tensors) override { m.set_weights(tensors); }
    void save_weights(const std::filesystem::path& path) override { m.save_weights(path); }
    std::filesystem::path save_checkpoint(const std::filesystem::path& dir, int keep) override {
      return m.save_checkpoint(dir, {.keep = keep});
    }
    void load_checkpoint(const std::filesystem::path& dir) override { m.load_checkpoint(dir); }
    bool is_chief() const override { return m.is_chief(); }
    void mean_over_workers(logs& l) override { m.mean_over_workers(l); }
    double learning_rate() const override { return m.learning_rate(); }
    void set_learning_rate(double rate) override { m.set_learning_rate(rate); }
    void swap_ema_weights() override { m.swap_ema_weights(); }
    bool ema_weights_in_model() const override { return m.ema_weights_in_model(); }
    void finalize_variable_values() override { m.finalize_variable_values(); }
    void for_each_parameter(const std::function<void(std::string_view, std::span<const float>)>& f) const override {
      const auto region = m.parameter_region();
      std::vector<float> values;
      parameters::for_each([&](const parameter_info& p) {
        const auto view = parameters::stored(p, region.data());
        values.assign(view.begin(), view.end());
        f(p.name, values);
      });
    }
    std::string summary_text(std::size_t line_length) const override { return model::summary_text(line_length); }
    std::vector<std::pair<std::string, std::string>> settings() const override { return m.settings(); }
  };

  // The batch_norm statistics inside the trainable region, as a zero<3>
  // checkpoint keeps them beside the weights' shards (train/checkpointing.hpp).
  static std::vector<region_range> trainable_statistics() {
    std::vector<region_range> statistics;
    for (const auto& t : parameter_table<Net>::tensors())
      if (t.kind == param_kind::statistic && t.offset < Net::trainable_floats) statistics.push_back({t.offset, t.size});
    return statistics;
  }
  // The checkpoint directory's files, written by this process: the weights
  // (under zero<3> those beyond the trainable region and its statistics: the
  // rest are in the shard files), the counters and either every slot
  // (slots) or none, with a zero<k> model's shards (shards).
  std::filesystem::path write_checkpoint_here(const std::filesystem::path& dir, const checkpoint_options& options,
                                              int slots, const io::checkpoint_shards_to_write* shards) {
    const std::optional<fit_snapshot> fit = training_.snapshot();
    constexpr bool weights_sharded = zero_stage_v<Strategy> >= 3;
    std::optional<std::vector<region_range>> statistics;
    if constexpr (weights_sharded) statistics = trainable_statistics();
    const std::span<const float> region = [&] {
      if constexpr (weights_sharded)
        return engine_.local_parameters();  // gathering nothing: its statistics and rest are whole
      else
        return engine_.parameters();
    }();
    const std::vector<io::tensor_to_write> tensors = checkpoint_tensors<Net>(
        region, slots, [&](int s) { return engine_.slot_values(s); }, fit, statistics);
    checkpoint_counters counters = saved_counters();
    counters.fit = fit;
    return io::write_checkpoint(dir, training_.iterations, tensors, make_checkpoint_manifest(checkpoint_id(), counters),
                                options.keep, shards);
  }
  // zero<k>: each rank writes its shards of the slots (under zero<3> and of
  // the trainable weights), so that none gathers a whole slot or the
  // weights. Under mirrored<N> this process writes every replica's
  // file; across workers each worker stages its file beside the
  // checkpoints, after the chief readied the directory and before the chief
  // writes the rest and moves the staged files in; each of the three steps
  // ends with every worker knowing whether all succeeded.
  std::filesystem::path save_sharded_checkpoint(const std::filesystem::path& dir, const checkpoint_options& options)
    requires is_zero_v<Strategy>
  {
    const std::vector<std::size_t> cut = engine_.shard_cut();
    const int count = static_cast<int>(cut.size()) - 1;
    io::checkpoint_shards_to_write shards{{cut.begin(), cut.end()}, {}, Strategy::across_processes};
    for (const int i : engine_.held_shards()) {
      io::checkpoint_shard shard{i, cut[i], cut[i + 1], {}};
      if constexpr (zero_stage_v<Strategy> >= 3) {  // first: a file's last bytes stay its last slot's
        const std::span<const float> weights = engine_.weight_shard(i);
        shard.tensors.push_back({"parameters", "F32", {static_cast<std::int64_t>(weights.size())}, weights.data(),
                                 weights.size_bytes()});
      }
      for (int s = 0; s < training_.slots; ++s) {
        const std::span<const float> part = engine_.slot_shard(i, s);
        shard.tensors.push_back({slot_tensor_name(s), "F32", {static_cast<std::int64_t>(part.size())}, part.data(),
                                 part.size_bytes()});
      }
      shards.here.push_back(std::move(shard));
    }
    const std::int64_t number = training_.iterations;
    std::filesystem::path written = dir / io::detail::checkpoint_name(number);
    if constexpr (Strategy::across_processes) {
      on_every_rank("save_checkpoint", [&] {
        if (is_chief()) io::prepare_checkpoint_dir(dir, number, options.keep);
      });
      on_every_rank("save_checkpoint", [&] {
        for (const io::checkpoint_shard& shard : shards.here)
          io::write_checkpoint_shard(io::staged_shard_path(dir, written.filename().string(), shard.index, count), shard,
                                     count);
      });
      shards.here.clear();  // the chief moves every worker's staged file in, its own too
      on_every_rank("save_checkpoint", [&] {
        if (is_chief()) written = write_checkpoint_here(dir, options, 0, &shards);
      });
      return written;
    } else {
      return write_checkpoint_here(dir, options, 0, &shards);
    }
  }
  // `work`, and across zero<k>'s workers whether it succeeded on every one
  // (train/cpu_worker_shards.hpp's all_or_none); elsewhere just `work`.
  template <class Work>
  void on_every_rank(const std::string& step, Work&& work) {
    if constexpr (is_zero_v<Strategy> && Strategy::across_processes)
      engine_.all_or_none(step, std::forward<Work>(work));
    else
      work();
  }

  checkpoint_identity checkpoint_id() const {
    return {network_name<Net>(), policy_name<policy_type>(), strategy_name<Strategy>(), Device::name,
            Net::parameter_floats};
  }
  checkpoint_counters saved_counters() const {
    return counters_of(training_, trained_batch_size_, engine_.counters());
  }
  template <int N>
  static void check_budget(int slots, const char* where) {
    check_device_budget<Budget, Net, N, Strategy, Device>(slots, where);
  }

  // A run continued from a checkpoint trains at the checkpoint's batch size.
  template <int N>
  void check_batch_size(const char* where) {
    if (trained_batch_size_ != 0 && trained_batch_size_ != N && resumed_)
      throw std::invalid_argument(std::string(where) + ": the checkpoint this model continues from was trained at "
                                  "batch size " + std::to_string(trained_batch_size_) + "; these batches hold " +
                                  std::to_string(N));
    trained_batch_size_ = N;
    resumed_ = false;
  }

  using parameters = parameter_table<Net>;
  using parameter_info = typename parameters::info;
  std::uint64_t seed_;
  int trained_batch_size_ = 0;  // the last fit's or train_on_batch's batch size (a checkpoint records it)
  bool resumed_ = false;        // load_checkpoint ran: the batch size must stay
  training_state<Net> training_;  // compile()'s optimizer, loss and metrics, counters, means
  engine_type engine_;            // the device's arena, programs and steps; the strategy's replicas
};

}  // namespace typeflow

// model<Net, Policy, single_device, cuda>: the same model type, trained on an
// NVIDIA GPU.
//
// The weights, gradients, optimizer slots and activations live in one
// cudaMalloc arena laid out by the same compile-time memory plan as on the
// CPU (so the parameter region is the same bytes on both devices). A host
// model<Net, Policy> beside it owns what needs no GPU: initialisation (the
// same seed gives the same weights on both devices), names, summary and the
// weights files; weights move between the two only when one side changed.
//
// One training step is captured once per batch size as a CUDA graph and
// replayed: the batch's copy into the input, forward, the fused loss,
// backward, the optimizer (one statistics pass, one update kernel), and the
// copies of the step's losses and outputs back to pinned memory. The next
// batch's host-to-device copy runs on a second stream while a step computes.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "typeflow/backend/cuda/layers.cuh"
#include "typeflow/backend/cuda/matmul.hpp"
#include "typeflow/backend/cuda/device_optimizer.cuh"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/backend/cuda/softmax_cross_entropy.cuh"
#include "typeflow/backend/device.hpp"
#include "typeflow/train/model.hpp"

namespace typeflow {

namespace detail::cuda_model {

namespace cu = backend::cuda;

// A network's forward and backward for one batch size on the device: the
// CUDA twin of step_program, on the same plan.
template <class Net, int Batch>
class device_program {
 public:
  using plan = memory_plan<Net, Batch, 0>;
  static constexpr int batch_size = Batch;
  static constexpr std::size_t layer_count = Net::layer_count;
  static constexpr std::size_t last = layer_count - 1;

  device_program(std::byte* arena, std::size_t step_base, cublasLtHandle_t lt, std::byte* gemm_workspace,
                 std::size_t gemm_workspace_bytes, const cu::step_values* step, std::uint64_t seed)
      : base_(arena + step_base - plan::activations_offset),
        params_(reinterpret_cast<float*>(arena + plan::parameters_offset)),
        grads_(reinterpret_cast<float*>(arena + plan::gradients_offset)),
        scratch_(scratch_bytes()),
        executors_(make_executors(lt, gemm_workspace, gemm_workspace_bytes, step, seed,
                                  std::make_index_sequence<layer_count>{})) {}

  float* input() const { return activation(0); }
  float* output() const { return activation(last); }
  float* output_gradient() const { return gradient_of_output(last); }
  float* row_losses() const { return reinterpret_cast<float*>(base_ + plan::loss_rows_offset); }

  void forward(cudaStream_t s, bool training) {
    std::apply([&](auto&... e) { (e.forward(s, training), ...); }, executors_);
  }
  void backward(cudaStream_t s) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (std::get<last - I>(executors_).backward(s), ...);
    }(std::make_index_sequence<layer_count>{});
  }

 private:
  template <std::size_t I>
  using executor_at = cu::cuda_executor<typename Net::template spec<I>, typename Net::template layer<I>, Batch>;

  static std::size_t scratch_bytes() {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      std::size_t most = 0;
      ((most = std::max(most, executor_at<I>::scratch_bytes())), ...);
      return most;
    }(std::make_index_sequence<layer_count>{});
  }

  float* activation(std::size_t i) const { return reinterpret_cast<float*>(base_ + plan::activation_offset[i]); }
  float* gradient_of_output(std::size_t i) const {
    return reinterpret_cast<float*>(base_ + plan::gradient_buffer_offset[plan::output_gradient_buffer[i]]);
  }

  template <std::size_t I>
  executor_at<I> make_executor(cublasLtHandle_t lt, std::byte* gemm_workspace, std::size_t gemm_workspace_bytes,
                               const cu::step_values* step, std::uint64_t seed) {
    static_assert(!Net::template layer<I>::uses_tied_embedding,
                  "model<Net, Policy, Strategy, cuda>: tied embeddings have no CUDA executor yet");
    cu::device_layer_io io;
    io.in = I > 0 ? activation(I - 1) : nullptr;
    io.out = activation(I);
    io.d_in = (I > 0 && Net::needs_input_gradient[I]) ? gradient_of_output(I - 1) : nullptr;
    io.d_out = gradient_of_output(I);
    io.params = params_ + plan::layer_parameter_offset[I] / sizeof(float);
    io.grads = grads_ + plan::layer_parameter_offset[I] / sizeof(float);
    io.workspace = base_ + plan::workspace_offset[I];
    io.scratch = scratch_.template data<std::byte>();
    io.lt = lt;
    io.gemm_workspace = gemm_workspace;
    io.gemm_workspace_bytes = gemm_workspace_bytes;
    io.step = step;
    io.seed = seed;
    return executor_at<I>(io);
  }

  template <class Sequence>
  struct executors_of;
  template <std::size_t... I>
  struct executors_of<std::index_sequence<I...>> {
    using type = std::tuple<executor_at<I>...>;
  };
  using executors_type = typename executors_of<std::make_index_sequence<layer_count>>::type;

  template <std::size_t... I>
  executors_type make_executors(cublasLtHandle_t lt, std::byte* gemm_workspace, std::size_t gemm_workspace_bytes,
                                const cu::step_values* step, std::uint64_t seed, std::index_sequence<I...>) {
    return executors_type{make_executor<I>(lt, gemm_workspace, gemm_workspace_bytes, step, seed)...};
  }

  std::byte* base_;
  float* params_;
  float* grads_;
  cu::device_buffer scratch_;
  executors_type executors_;
};

}  // namespace detail::cuda_model

template <class Network, class Policy, class Strategy>
class model<Network, Policy, Strategy, cuda> {
  static_assert(std::is_same_v<Strategy, single_device>,
                "model<Net, Policy, Strategy, cuda>: on tf::cuda only single_device exists so far; mirrored<N> "
                "over NCCL (backend/cuda/nccl.hpp) is not wired into the model yet");
  using host_model = model<Network, Policy, single_device, cpu>;
  using Net = typename host_model::bound_network;
  static_assert(!host_model::loss_scaling && std::is_same_v<typename host_model::policy_type, float32_policy>,
                "model<Net, Policy, Strategy, cuda>: only the float32 policy runs on tf::cuda so far");
  static_assert(!host_model::bound_network::has_regularizers,
                "model<Net, Policy, Strategy, cuda>: kernel and bias regularizers are not on tf::cuda yet");
  using plan0 = memory_plan<Net, 0, 0>;
  template <int N>
  using program_type = detail::cuda_model::device_program<Net, N>;
  static constexpr std::size_t gemm_workspace_bytes = std::size_t{32} << 20;

 public:
  using policy_type = typename host_model::policy_type;
  using network = Network;
  using bound_network = Net;
  using output_shape_type = typename Net::output_shape_type;
  static constexpr int classes = host_model::classes;
  static constexpr std::size_t rows_per_sample = host_model::rows_per_sample;
  static constexpr std::size_t parameter_count = Net::parameter_count;
  static constexpr int replica_count = 1;

  // The same weights as model<Net, Policy> with this seed, on device `device`.
  explicit model(std::uint64_t seed = 0, int device = 0)
      : host_(seed),
        device_(device),
        gemm_workspace_(gemm_workspace_bytes),
        step_device_(sizeof(backend::cuda::step_values)),
        step_host_(sizeof(backend::cuda::step_values)) {}
  model(const model&) = delete;
  model& operator=(const model&) = delete;

  void summary(std::FILE* out = stdout) const { host_.summary(out); }

  template <optimizers::optimizer Optimizer, losses::loss Loss, detail::metric... Metrics>
  void compile(Optimizer optimizer, Loss loss, Metrics... metrics) {
    static_assert(std::is_same_v<Loss, losses::sparse_categorical_crossentropy>,
                  "compile on tf::cuda: the loss runs as one fused softmax + cross-entropy kernel; only "
                  "sparse_categorical_crossentropy{.from_logits = true} exists so far");
    if (!loss.from_logits)
      throw std::invalid_argument("compile on tf::cuda: sparse_categorical_crossentropy needs from_logits = true "
                                  "(the fused kernel takes logits; end the network with a dense layer, no softmax)");
    backend::cuda::device_guard on(device_);
    download_weights();
    optimizer_ = backend::cuda::make_device_optimizer(optimizer, host_model::parameter_tensors_,
                                                      Net::parameter_floats);
    host_.compile(std::move(optimizer), std::move(loss), std::move(metrics)...);
    // Fresh optimizer state on the device: the arena is laid out again.
    for (auto& g : train_graph_) g.reset();
    programs_.reset();
    arena_ = backend::cuda::device_buffer();
    device_has_weights_ = false;
  }

  template <data::batched_dataset Dataset>
  history fit(const Dataset& train, fit_options<typename Dataset::element_type> options = {}) {
    using batch_type = typename Dataset::element_type;
    host_model::template check_batch_type<batch_type>();
    host_.require_compiled("fit");
    host_.template check_label_form<batch_type>("fit");
    static_assert(std::is_same_v<typename batch_type::label_value, std::int32_t>,
                  "fit on tf::cuda: the fused loss takes int32 class ids");
    backend::cuda::device_guard on(device_);
    auto& program = program_for<batch_type::size>();
    history result;
    history_recorder recorder{result};
    std::unique_ptr<progress_bar> bar;
    if (options.verbose == 1) bar = std::make_unique<progress_bar>(stdout);
    if (options.verbose == 2) bar = std::make_unique<progress_bar>(stdout, progress_bar::display::lines);
    std::vector<callback*> callbacks;
    if (bar) callbacks.push_back(bar.get());
    callbacks.insert(callbacks.end(), options.callbacks.begin(), options.callbacks.end());
    callbacks.push_back(&recorder);

    const std::int64_t full_batches = train.cardinality() < 0 ? -1 : host_model::full_batch_count(train);
    logs step_logs, epoch_logs;
    for (auto* c : callbacks) c->on_train_begin();
    for (int epoch = 0; epoch < options.epochs; ++epoch) {
      const epoch_info info{epoch, options.epochs, full_batches};
      for (auto* c : callbacks) c->on_epoch_begin(info);
      host_.reset_metrics();
      auto cursor = train.open(static_cast<std::uint64_t>(host_.epoch_counter_++));
      std::int64_t step = 0;
      using clock = std::chrono::steady_clock;
      clock::duration waited{}, stepped{};
      // Batch k + 1 is read and copied while step k computes.
      batch_type batch;
      auto asked = clock::now();
      bool have = cursor.next(batch) && batch.valid == batch_type::size;
      int parity = 0;
      if (have) stage(program, batch, parity);
      while (have) {
        const auto received = clock::now();
        waited += received - asked;
        launch_train_step(program, parity);
        asked = clock::now();
        const bool next = cursor.next(batch) && batch.valid == batch_type::size;
        if (next) stage(program, batch, 1 - parity);
        const auto staged = clock::now();
        waited += staged - asked;
        finish_train_step(program, parity);
        ++step;
        stepped += clock::now() - staged;
        host_.fill_logs(step_logs, "");
        step_logs.set("learning_rate", host_.optimizer_->learning_rate(host_.iterations_ + 1));
        step_logs.set("input_wait_fraction",
                      std::chrono::duration<double>(waited) / std::chrono::duration<double>(waited + stepped));
        for (auto* c : callbacks) c->on_batch_end(step, step_logs);
        have = next;
        parity = 1 - parity;
        asked = clock::now();
      }
      if (step == 0)
        throw std::invalid_argument("fit: epoch " + std::to_string(epoch + 1) + " had no full batch of " +
                                    std::to_string(batch_type::size) + " samples to train on");
      epoch_logs = step_logs;
      if (options.validation_data) {
        run_evaluation(program, options.validation_data);
        host_.fill_logs(epoch_logs, "val_");
      }
      for (auto* c : callbacks) c->on_epoch_end(info, epoch_logs);
    }
    for (auto* c : callbacks) c->on_train_end(epoch_logs);
    download_weights();
    return result;
  }

  // One optimisation step on one full batch; returns its mean loss.
  template <int N, class Features, class Label>
  double train_on_batch(const data::batch_of<N, Features, Label>& batch) {
    using batch_type = data::batch_of<N, Features, Label>;
    host_model::template check_batch_type<batch_type>();
    host_.require_compiled("train_on_batch");
    host_.template check_label_form<batch_type>("train_on_batch");
    if (batch.valid != N)
      throw std::invalid_argument("train_on_batch: the batch holds " + std::to_string(batch.valid) + " of " +
                                  std::to_string(N) + " samples; training steps take full batches");
    backend::cuda::device_guard on(device_);
    auto& program = program_for<N>();
    stage(program, batch, 0);
    launch_train_step(program, 0);
    return finish_train_step(program, 0);
  }

  template <data::batched_dataset Dataset>
  evaluation evaluate(const Dataset& data) {
    using batch_type = typename Dataset::element_type;
    host_model::template check_batch_type<batch_type>();
    host_.require_compiled("evaluate");
    host_.template check_label_form<batch_type>("evaluate");
    backend::cuda::device_guard on(device_);
    run_evaluation(program_for<batch_type::size>(), data);
    logs results;
    host_.fill_logs(results, "");
    evaluation out;
    for (const auto& entry : results) out.emplace(std::string(entry.name), entry.value);
    return out;
  }

  // The model's outputs for every sample of `data`, (samples, output shape)
  // row-major, in inference mode; labels, if any, are ignored.
  template <data::batched_dataset Dataset>
  std::vector<float> predict(const Dataset& data) {
    using batch_type = typename Dataset::element_type;
    host_model::template check_batch_type<batch_type>();
    backend::cuda::device_guard on(device_);
    auto& program = program_for<batch_type::size>();
    constexpr std::size_t per_sample = output_shape_type::size;
    std::vector<float> outputs;
    batch_type batch;
    auto cursor = data.open(0);
    while (cursor.next(batch)) {
      stage_features(batch, 0);
      staging_[0].copied.wait_on(compute_.get());
      TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(program.input(), staging_[0].device.data(), staged_feature_bytes_,
                                          cudaMemcpyDeviceToDevice, compute_.get()));
      program.forward(compute_.get(), false);
      const std::size_t count = static_cast<std::size_t>(batch.valid) * per_sample;
      const std::size_t at = outputs.size();
      outputs.resize(at + count);
      TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(outputs.data() + at, program.output(), count * sizeof(float),
                                          cudaMemcpyDeviceToHost, compute_.get()));
      compute_.synchronize();
    }
    return outputs;
  }

  // Weights: the host model's, brought up to date first.
  void save_weights(const std::filesystem::path& path) {
    download_weights();
    host_.save_weights(path);
  }
  void load_weights(const std::filesystem::path& path) {
    host_.load_weights(path);
    device_has_weights_ = false;
  }
  std::vector<io::tensor_spec> parameter_specs() const { return host_.parameter_specs(); }
  // A parameter's values on the host; writes through the view reach the device before the next step.
  strided_view<float> parameter(std::string_view name) {
    download_weights();
    device_has_weights_ = false;
    return host_.parameter(name);
  }
  std::span<const float> parameter_region() {
    download_weights();
    return host_.parameter_region();
  }
  std::int64_t iterations() const { return host_.iterations_; }
  bool is_chief() const { return true; }
  int device() const { return device_; }
  // The device arena's size in bytes (0 before the first step).
  std::size_t arena_bytes() const { return arena_.size(); }

 private:
  // The arena for batch size N (weights uploaded), and its program, once per size.
  template <int N>
  program_type<N>& program_for() {
    if (!programs_ || program_batch_ != N) {
      using plan = memory_plan<Net, N, 0>;
      const std::size_t step_base = host_.step_base();
      const std::size_t total = step_base + (plan::total_bytes - plan::activations_offset);
      if (arena_.size() < total) {
        // Growing keeps the weights, gradients and slots (the prefix), as on the CPU.
        backend::cuda::device_buffer grown(total);
        TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(grown.data(), 0, total, compute_.get()));
        if (arena_.size())
          TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(grown.data(), arena_.data(), std::min(step_base, arena_.size()),
                                              cudaMemcpyDeviceToDevice, compute_.get()));
        compute_.synchronize();
        arena_ = std::move(grown);
      }
      for (auto& g : train_graph_) g.reset();
      programs_.reset();
      auto program = std::make_shared<program_type<N>>(arena_.data(), step_base, lt_.get(), gemm_workspace_.data(),
                                                       gemm_workspace_bytes,
                                                       step_device_.template data<backend::cuda::step_values>(),
                                                       host_.run_.seed);
      // Staging: two pinned host buffers and two device buffers per input, so
      // batch k + 1 moves while step k runs.
      constexpr std::size_t feature_bytes = static_cast<std::size_t>(N) * Net::input_shape_type::size *
                                            sizeof(typename Net::input_dtype::value_type);
      constexpr std::size_t label_bytes = static_cast<std::size_t>(N) * rows_per_sample * sizeof(std::int32_t);
      for (auto& s : staging_) {
        s.host = backend::cuda::pinned_buffer(feature_bytes + label_bytes);
        s.device = backend::cuda::device_buffer(feature_bytes + label_bytes);
        s.copied = backend::cuda::event();
      }
      staged_feature_bytes_ = feature_bytes;
      staged_label_bytes_ = label_bytes;
      constexpr std::size_t rows = static_cast<std::size_t>(N) * rows_per_sample;
      results_host_ = backend::cuda::pinned_buffer((rows + rows * classes) * sizeof(float) + 64);
      programs_ = program;
      program_batch_ = N;
    }
    if (!device_has_weights_) upload_weights();
    return *std::static_pointer_cast<program_type<N>>(programs_);
  }

  // The host copies a batch into pinned memory and queues its upload.
  template <class Program, class Batch>
  void stage(Program&, const Batch& batch, int parity) {
    auto& s = staging_[parity];
    static_assert(std::is_same_v<typename Batch::label_value, std::int32_t>,
                  "model<..., cuda>: the fused loss takes int32 class ids as labels");
    std::memcpy(s.host.data(), batch.features.data(), staged_feature_bytes_);
    std::memcpy(s.host.data() + staged_feature_bytes_, batch.labels.data(), staged_label_bytes_);
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(s.device.data(), s.host.data(), staged_feature_bytes_ + staged_label_bytes_,
                                        cudaMemcpyHostToDevice, copy_.get()));
    s.copied.record(copy_.get());
  }
  // The features only (predict: the dataset may have no class ids).
  template <class Batch>
  void stage_features(const Batch& batch, int parity) {
    auto& s = staging_[parity];
    std::memcpy(s.host.data(), batch.features.data(), staged_feature_bytes_);
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(s.device.data(), s.host.data(), staged_feature_bytes_, cudaMemcpyHostToDevice,
                                        copy_.get()));
    s.copied.record(copy_.get());
  }

  // Step k's graph: the one for its staging buffer, captured on first use.
  template <class Program>
  void launch_train_step(Program& program, int parity) {
    auto& s = staging_[parity];
    s.copied.wait_on(compute_.get());
    ++host_.run_.step;
    auto* values = step_host_.template data<backend::cuda::step_values>();
    values->step = host_.run_.step;
    optimizer_->prepare(host_.iterations_ + 1, compute_.get());
    auto& graph = train_graph_[parity];
    if (!graph.captured()) graph.capture(compute_.get(), [&](cudaStream_t cs) { record_train_step(program, parity, cs); });
    graph.launch(compute_.get());
  }

  // Everything one training step does, as recorded into its graph.
  template <class Program>
  void record_train_step(Program& program, int parity, cudaStream_t s) {
    constexpr int N = Program::batch_size;
    constexpr int rows = N * static_cast<int>(rows_per_sample);
    auto& staged = staging_[parity];
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(step_device_.data(), step_host_.data(), sizeof(backend::cuda::step_values),
                                        cudaMemcpyHostToDevice, s));
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(program.input(), staged.device.data(), staged_feature_bytes_,
                                        cudaMemcpyDeviceToDevice, s));
    program.forward(s, true);
    backend::cuda::sparse_softmax_cross_entropy(program.output(), labels_on_device(parity), program.output_gradient(),
                                                program.row_losses(), rows, classes, rows, 1.f, s);
    program.backward(s);
    optimizer_->record_update(arena_.data(), plan0::gradients_offset, slot_offsets(), s);
    record_results_download(program, rows, s);
  }

  const std::int32_t* labels_on_device(int parity) const {
    return reinterpret_cast<const std::int32_t*>(staging_[parity].device.data() + staged_feature_bytes_);
  }

  std::array<std::size_t, 8> slot_offsets() const {
    std::array<std::size_t, 8> offsets{};
    for (int s = 0; s < host_.slots_ && s < 8; ++s) offsets[static_cast<std::size_t>(s)] = plan0::slot_offset(s);
    return offsets;
  }

  // Row losses and outputs back to pinned memory, for the logs and metrics.
  template <class Program>
  void record_results_download(Program& program, int rows, cudaStream_t s) {
    float* host = results_host_.template data<float>();
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(host, program.row_losses(), static_cast<std::size_t>(rows) * sizeof(float),
                                        cudaMemcpyDeviceToHost, s));
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(host + rows, program.output(),
                                        static_cast<std::size_t>(rows) * classes * sizeof(float),
                                        cudaMemcpyDeviceToHost, s));
  }

  // Waits for the step, then updates the loss mean and metrics on the host.
  template <class Program>
  double finish_train_step(Program&, int parity) {
    constexpr int N = Program::batch_size;
    constexpr int rows = N * static_cast<int>(rows_per_sample);
    compute_.synchronize();
    ++host_.iterations_;
    const float* row_loss = results_host_.template data<float>();
    double sum = 0;
    for (int r = 0; r < rows; ++r) sum += row_loss[r];
    const double loss = sum / rows;
    host_.loss_mean_.update(loss, N);
    host_stale_ = true;
    // The step's labels are still in its pinned buffer: the next batch went to the other one.
    const auto* labels = reinterpret_cast<const std::int32_t*>(staging_[parity].host.data() + staged_feature_bytes_);
    const float* outputs = row_loss + rows;
    for (auto& m : host_.metrics_) m->update(outputs, labels, rows, classes);
    return loss;
  }

  // Inference over a dataset, without a graph (the last batch may be partial).
  template <class Program, class Data>
  void run_evaluation(Program& program, const Data& data) {
    using batch_type = typename Data::element_type;
    constexpr int N = batch_type::size;
    constexpr int rows = N * static_cast<int>(rows_per_sample);
    host_.reset_metrics();
    batch_type batch;
    auto cursor = data.open(0);
    const float* out = results_host_.template data<float>() + rows;
    while (cursor.next(batch)) {
      stage(program, batch, 0);
      staging_[0].copied.wait_on(compute_.get());
      TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(program.input(), staging_[0].device.data(), staged_feature_bytes_,
                                          cudaMemcpyDeviceToDevice, compute_.get()));
      program.forward(compute_.get(), false);
      const int valid_rows = batch.valid * static_cast<int>(rows_per_sample);
      backend::cuda::sparse_softmax_cross_entropy(program.output(), labels_on_device(0), program.output_gradient(),
                                                  program.row_losses(), rows, classes, valid_rows, 1.f,
                                                  compute_.get());
      record_results_download(program, rows, compute_.get());
      compute_.synchronize();
      double sum = 0;
      for (int r = 0; r < valid_rows; ++r) sum += results_host_.template data<float>()[r];
      if (valid_rows > 0) host_.loss_mean_.update(sum / valid_rows, batch.valid);
      for (auto& m : host_.metrics_) m->update(out, batch.labels.data(), valid_rows, classes);
    }
  }

  // Host -> device: the parameter region and, after compile, zeroed state.
  void upload_weights() {
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(arena_.data(), host_.memory_.data(), plan0::parameter_bytes,
                                        cudaMemcpyHostToDevice, compute_.get()));
    compute_.synchronize();
    device_has_weights_ = true;
    host_stale_ = false;
  }
  // Device -> host, when the device trained since the last copy.
  void download_weights() {
    if (!host_stale_ || !arena_.size()) return;
    backend::cuda::device_guard on(device_);
    TYPEFLOW_CUDA_CHECK(cudaMemcpy(host_.memory_.data(), arena_.data(), plan0::parameter_bytes, cudaMemcpyDeviceToHost));
    host_stale_ = false;
  }

  struct staging_buffers {
    backend::cuda::pinned_buffer host;
    backend::cuda::device_buffer device;
    backend::cuda::event copied;
  };

  // Checks for the device and makes it current, before any member below
  // creates a stream or allocates: they all belong to it.
  struct chosen_device {
    int index;
    explicit chosen_device(int d) : index(d) {
      if (d < 0) throw std::invalid_argument("model<..., cuda>: device " + std::to_string(d) + " is negative");
      backend::cuda::require_devices(d + 1, "model<Net, Policy, Strategy, cuda>");
      TYPEFLOW_CUDA_CHECK(cudaSetDevice(d));
    }
    operator int() const { return index; }
  };

  host_model host_;
  chosen_device device_;
  backend::cuda::stream compute_, copy_;
  backend::cuda::lt_handle lt_;
  backend::cuda::device_buffer gemm_workspace_;
  backend::cuda::device_buffer step_device_;
  backend::cuda::pinned_buffer step_host_;
  backend::cuda::device_buffer arena_;
  std::unique_ptr<backend::cuda::device_optimizer_base> optimizer_;
  std::shared_ptr<void> programs_;
  int program_batch_ = 0;
  std::array<staging_buffers, 2> staging_;
  std::size_t staged_feature_bytes_ = 0, staged_label_bytes_ = 0;
  backend::cuda::pinned_buffer results_host_;
  std::array<backend::cuda::graph, 2> train_graph_;
  bool device_has_weights_ = false;
  bool host_stale_ = false;
};

}  // namespace typeflow

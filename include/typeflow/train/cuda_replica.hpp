// cuda_replica<Net>: one GPU of an engine<Net, Policy, Strategy, cuda>
// (train/cuda_engine.hpp) and everything on it: its streams, cuBLASLt
// handle, arena (the weights, gradients, slots and the step program laid
// out by the memory plan), optimizer, double-buffered staging of the batch,
// the step's scalars and its captured graphs. mirrored<N> holds N of them;
// single_device and each multi_worker process, one.
//
// cuda_decoder_view<Net>: generate_tokens' view of a replica's decoder;
// cuda_inference_pass<Net, N>: predict's and evaluate's.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "typeflow/backend/cuda/device_optimizer.hpp"
#include "typeflow/backend/cuda/elementwise.hpp"
#include "typeflow/backend/cuda/losses.hpp"
#include "typeflow/backend/cuda/matmul.hpp"
#include "typeflow/backend/cuda/metric_hits.hpp"
#include "typeflow/backend/cuda/regularization.hpp"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/backend/device.hpp"
#include "typeflow/layers/embedding.hpp"
#include "typeflow/train/program_slot.hpp"
#include "typeflow/train/regularization.hpp"
#include "typeflow/train/step_program.hpp"
#include "typeflow/train/training_state.hpp"

namespace typeflow {

// The network's outputs as the device stores them: float, or a GPU head's
// bf16 logits (Net::bf16_logits, layers/embedding.hpp), which the loss reads
// and writes its gradient over, and the device's metrics count, in bf16.
template <class Net>
struct cuda_outputs {
  using shape_type = typename Net::output_shape_type;
  static constexpr int classes = shape_type::rank >= 1 ? shape_type::template dim<-1> : 1;
  static constexpr int row_stride = Net::output_row_stride;

  static auto* stored(const float* outputs) {
    if constexpr (Net::bf16_logits) return reinterpret_cast<const bf16*>(outputs);
    else return outputs;
  }
  // Rows of them into packed floats at `host`, which must be pinned
  // (cuda_replica::results()) for bf16 logits: the device converts them as
  // it writes there.
  static void to_host(float* host, const float* outputs, int rows, cudaStream_t s) {
    if constexpr (Net::bf16_logits)
      backend::cuda::bf16_rows_to_float(stored(outputs), host, rows, classes, row_stride, s);
    else
      backend::cuda::copy_rows_to_host(host, outputs, rows, classes, row_stride, s);
  }
  // The loss's row losses, and its gradient (scale 1) at d_outputs.
  static void record(const backend::cuda::device_loss_base& loss, float* outputs, const void* labels,
                     float* d_outputs, float* row_losses, int rows, int valid_rows, cudaStream_t s) {
    if constexpr (Net::bf16_logits)
      loss.record_bf16(stored(outputs), labels, reinterpret_cast<bf16*>(d_outputs), row_losses, rows, classes,
                       row_stride, valid_rows, s);
    else
      loss.record(outputs, labels, d_outputs, row_losses, rows, classes, row_stride, valid_rows, s);
  }
};

// One replica: a device and everything on it.
template <class Net>
struct cuda_replica {
  template <int N>
  using program_type = step_program<Net, N, cuda>;
  using decoder_type = step_program<typename Net::decoder, 1, cuda>;  // model::generate's
  static constexpr std::size_t gemm_workspace_bytes = std::size_t{32} << 20;
  static constexpr bool has_regularizers = Net::has_regularizers;
  static constexpr int classes = training_state<Net>::classes;
  static constexpr std::size_t rows_per_sample = training_state<Net>::rows_per_sample;
  using step_state = optimizers::device::step_state;

  struct staging_buffers {
    backend::cuda::pinned_buffer host;
    backend::cuda::device_buffer device;
    backend::cuda::event copied;
  };

  // Checks the device and makes it current, before any member after it
  // creates a stream or allocates: they all belong to it.
  struct chosen_device {
    int index;
    explicit chosen_device(int d) : index(d) { TYPEFLOW_CUDA_CHECK(cudaSetDevice(d)); }
    operator int() const { return index; }
  };

  chosen_device device;
  run_state run;  // its seed draws its dropout masks; training says which pass is enqueued
  backend::cuda::stream compute, copy;
  backend::cuda::lt_handle lt;
  backend::cuda::device_buffer gemm_workspace{gemm_workspace_bytes};
  backend::cuda::device_buffer step_device{sizeof(backend::cuda::step_values)};
  backend::cuda::pinned_buffer step_host{sizeof(backend::cuda::step_values)};
  // The optimizer's step state as the last step left it (iterations, loss
  // scale, skipped steps), copied back by each step.
  backend::cuda::pinned_buffer state_host{sizeof(step_state)};
  backend::cuda::device_buffer arena;
  std::unique_ptr<backend::cuda::device_optimizer_base> optimizer;
  program_slot program;
  std::array<staging_buffers, 2> staging;
  // Each staging buffer: [features | labels | a weight a row], the weights
  // only for a step that weighs its rows (cuda_engine.hpp's stage_row_weights).
  std::size_t feature_bytes = 0, label_bytes = 0, weight_bytes = 0;
  backend::cuda::pinned_buffer results_host;  // row losses (evaluate), then outputs
  // Per parity, each metric's hits of the step (backend/cuda/metric_hits.hpp)
  // on the device and their copy on the host.
  std::array<backend::cuda::device_buffer, 2> hits_device;
  std::array<backend::cuda::pinned_buffer, 2> hits_host;
  // A training step's scalars, reduced on the device: the mean loss and
  // the regularizers' penalty; and their copy on the host.
  backend::cuda::device_buffer step_scalars{2 * sizeof(float)};
  backend::cuda::pinned_buffer step_scalars_host{2 * sizeof(float)};
  // The regularized tensors (train/regularization.hpp) and the penalty's partial sums.
  backend::cuda::device_buffer regularization_table, regularization_partials;
  int regularized_tensors = 0;
  // The step captured per parity; the weighted one also scales each row's
  // loss and gradient by the staged row weights.
  std::array<backend::cuda::graph, 2> train_graph, weighted_train_graph;

  // What its executors share: everything is enqueued on the compute stream.
  backend::cuda::context context{compute.get(), lt.get(), gemm_workspace.data(), gemm_workspace_bytes,
                                 step_device.template data<backend::cuda::step_values>()};

  cuda_replica(int d, std::uint64_t replica_seed) : device(d) {
    run.seed = replica_seed;
    if constexpr (has_regularizers) {
      std::vector<backend::cuda::regularization_entry> entries;
      for (const regularized_tensor& t : typeflow::regularized_tensors<Net>())
        entries.push_back({t.offset, t.size, t.l1, t.l2});
      regularized_tensors = static_cast<int>(entries.size());
      regularization_table = backend::cuda::device_buffer(entries.size() * sizeof(entries[0]));
      backend::cuda::copy_to_device(regularization_table.data(), entries.data(), regularization_table.size());
      regularization_partials = backend::cuda::device_buffer(backend::cuda::regularization_partials_bytes);
    }
  }
  const float* scalars() const { return step_scalars_host.template data<float>(); }  // [mean loss, penalty]

  void prepare_hits(std::size_t metrics) {
    for (std::size_t p = 0; p < 2; ++p) {
      hits_device[p] = backend::cuda::device_buffer(metrics * sizeof(unsigned long long));
      hits_host[p] = backend::cuda::pinned_buffer(metrics * sizeof(unsigned long long));
    }
  }
  unsigned long long* hits_on_device(int parity) const {
    return hits_device[static_cast<std::size_t>(parity)].template data<unsigned long long>();
  }
  const unsigned long long* hits_on_host(int parity) const {
    return hits_host[static_cast<std::size_t>(parity)].template data<unsigned long long>();
  }
  unsigned long long* hits_on_host(int parity) {
    return hits_host[static_cast<std::size_t>(parity)].template data<unsigned long long>();
  }

  step_state* state_mirror() const { return state_host.template data<step_state>(); }
  float* results() const { return results_host.template data<float>(); }
  // The staged batch's labels: int32 class ids or float targets, as the loss takes.
  const void* labels_on_device(int parity) const {
    return staging[static_cast<std::size_t>(parity)].device.data() + feature_bytes;
  }
  template <class Label>
  const Label* labels_on_host(int parity) const {
    return reinterpret_cast<const Label*>(staging[static_cast<std::size_t>(parity)].host.data() + feature_bytes);
  }
  float* row_weights_on_host(int parity) const {
    return reinterpret_cast<float*>(staging[static_cast<std::size_t>(parity)].host.data() + feature_bytes + label_bytes);
  }
  const float* row_weights_on_device(int parity) const {
    return reinterpret_cast<const float*>(staging[static_cast<std::size_t>(parity)].device.data() + feature_bytes +
                                          label_bytes);
  }
  void forget_program() {
    for (auto& g : train_graph) g.reset();
    for (auto& g : weighted_train_graph) g.reset();
    program.reset();
  }

  // Program (a step program at batch N) in the arena after the weights,
  // gradients and slots (program_slot::set_up), replacing the one held: the
  // arena grows to its plan keeping what lies below step_base, and the
  // captured graphs and the all-reduce over the old gradient region go.
  template <class Program, class Model>
  Program& set_up_program(Model& m, int marker) {
    backend::cuda::device_guard on(device);
    auto prepare_arena = [&](std::size_t bytes, std::size_t keep) {
      forget_program();
      m.replication_.forget();  // the gradient regions may have moved
      if (arena.size() < bytes) {
        backend::cuda::device_buffer grown(bytes);
        TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(grown.data(), 0, bytes, compute.get()));
        if (arena.size())
          TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(grown.data(), arena.data(), std::min(keep, arena.size()),
                                              cudaMemcpyDeviceToDevice, compute.get()));
        compute.synchronize();
        arena = std::move(grown);
      }
      return arena.data();
    };
    return program.template set_up<Program>(marker, m.step_base(), prepare_arena, context, run);
  }

  template <int N, class Model>
  program_type<N>& program_for(Model& m) {
    if (!program.template find<program_type<N>>(N)) {
      set_up_program<program_type<N>>(m, N);
      // Two pinned host buffers and two device buffers, so batch k + 1
      // moves while step k runs.
      feature_bytes = static_cast<std::size_t>(N) * Net::input_shape_type::size *
                      sizeof(typename Net::input_dtype::value_type);
      label_bytes = static_cast<std::size_t>(N) * m.label_values_per_sample_ * sizeof(float);  // or int32
      const std::size_t rows = static_cast<std::size_t>(N) * rows_per_sample;
      weight_bytes = rows * sizeof(float);
      for (auto& s : staging) {
        s.host = backend::cuda::pinned_buffer(feature_bytes + label_bytes + weight_bytes);
        s.device = backend::cuda::device_buffer(feature_bytes + label_bytes + weight_bytes);
        s.copied = backend::cuda::event();
      }
      results_host = backend::cuda::pinned_buffer((rows + rows * classes) * sizeof(float));
      if (m.loss_) {
        backend::cuda::device_guard on(device);
        m.loss_->prepare(static_cast<int>(rows));  // outside any captured step
      }
    }
    if (!m.device_has_weights_) m.upload_weights();
    return program.template get<program_type<N>>();
  }

  // The decoder, in the arena after the weights, gradients and slots as a
  // training program would be (it replaces the one held), once.
  template <class Model>
  decoder_type& decoder_for(Model& m) {
    constexpr int marker = -1;
    decoder_type& decoder = set_up_program<decoder_type>(m, marker);
    if (!m.device_has_weights_) m.upload_weights();
    return decoder;
  }

  // Copies one batch (or shard) into pinned memory and queues its upload.
  void stage(const void* features, const void* labels, int parity) {
    auto& s = staging[static_cast<std::size_t>(parity)];
    std::memcpy(s.host.data(), features, feature_bytes);
    std::memcpy(s.host.data() + feature_bytes, labels, label_bytes);
    enqueue_upload(s, 0, feature_bytes + label_bytes);
  }
  // The features only (predict: the dataset may have no class ids).
  void stage_features(const void* features, int parity) {
    auto& s = staging[static_cast<std::size_t>(parity)];
    std::memcpy(s.host.data(), features, feature_bytes);
    enqueue_upload(s, 0, feature_bytes);
  }
  // The row weights written to row_weights_on_host(parity), after stage().
  void stage_row_weights(int parity) {
    enqueue_upload(staging[static_cast<std::size_t>(parity)], feature_bytes + label_bytes, weight_bytes);
  }
  // The labels only (evaluate, after stage_features).
  void stage_labels(const void* labels, int parity) {
    auto& s = staging[static_cast<std::size_t>(parity)];
    std::memcpy(s.host.data() + feature_bytes, labels, label_bytes);
    enqueue_upload(s, feature_bytes, label_bytes);
  }
  void enqueue_upload(staging_buffers& s, std::size_t from, std::size_t bytes) {
    backend::cuda::device_guard on(device);
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(s.device.data() + from, s.host.data() + from, bytes,
                                        cudaMemcpyHostToDevice, copy.get()));
    s.copied.record(copy.get());
  }
};


// generate_tokens' view of the decoder on the device: input() is a token
// on the host; forward() uploads it, runs the decoder and brings the
// logits back (output()), waiting for them.
template <class Net>
struct cuda_decoder_view {
  using decoder_type = typename cuda_replica<Net>::decoder_type;
  static constexpr int classes = cuda_replica<Net>::classes;
  decoder_type& program;
  cuda_replica<Net>& r;
  std::int32_t token = 0;
  std::vector<float> logits = std::vector<float>(classes);

  // bf16 logits come through pinned memory, converted by the device.
  backend::cuda::pinned_buffer converted{Net::decoder::bf16_logits ? classes * sizeof(float) : 0};

  std::int32_t* input() { return &token; }
  void forward() {
    const cudaStream_t s = r.compute.get();
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(program.input(), &token, sizeof token, cudaMemcpyHostToDevice, s));
    program.forward();
    if constexpr (Net::decoder::bf16_logits) {
      cuda_outputs<typename Net::decoder>::to_host(converted.template data<float>(), program.output(), 1, s);
      r.compute.synchronize();
      std::copy_n(converted.template data<float>(), classes, logits.data());
    } else {
      TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(logits.data(), program.output(), logits.size() * sizeof(float),
                                          cudaMemcpyDeviceToHost, s));
      r.compute.synchronize();
    }
  }
  const float* output() const { return logits.data(); }
};

// The batch's labels are what the compiled loss takes: one int32 class id
// per output row (sparse), or one float per output value (dense).
template <class Batch>
void check_device_label_bytes(std::size_t label_values_per_sample, std::string_view loss_name) {
  constexpr std::size_t per_sample = Batch::label_type::size;
  if (per_sample != label_values_per_sample || sizeof(typename Batch::label_value) != sizeof(float))
    throw std::invalid_argument("model<..., cuda>: the batch has " + std::to_string(per_sample) +
                                " label values per sample; the loss (" + std::string(loss_name) + ") takes " +
                                std::to_string(label_values_per_sample));
}

// predict's and evaluate's view of a replica's program for batch size N
// (train/inference_loop.hpp): each call waits for the device.
template <class Net, int N>
struct cuda_inference_pass {
  static constexpr int classes = cuda_replica<Net>::classes;
  static constexpr int row_stride = training_state<Net>::row_stride;
  static constexpr int rows = N * static_cast<int>(cuda_replica<Net>::rows_per_sample);
  cuda_replica<Net>& r;
  typename cuda_replica<Net>::template program_type<N>& program;
  backend::cuda::device_loss_base* loss_executor;  // the compiled loss's (null before compile)
  std::size_t label_values_per_sample;
  const training_state<Net>& training;
  backend::cuda::device_guard on{r.device};

  template <class Batch>
  void forward(const Batch& batch) {
    check_token_ids_of<Net>(batch);
    r.stage_features(batch.features.data(), 0);
    r.staging[0].copied.wait_on(r.compute.get());
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(program.input(), r.staging[0].device.data(), r.feature_bytes,
                                        cudaMemcpyDeviceToDevice, r.compute.get()));
    r.run.training = false;
    program.forward();
  }
  // `count` floats: whole rows of `classes` (their padding left behind);
  // bf16 logits through the pinned results buffer.
  void append_outputs(std::vector<float>& to, std::size_t count) {
    const std::size_t at = to.size();
    to.resize(at + count);
    float* landing = Net::bf16_logits ? r.results() + rows : to.data() + at;
    cuda_outputs<Net>::to_host(landing, program.output(), static_cast<int>(count / classes), r.compute.get());
    r.compute.synchronize();
    if (landing != to.data() + at) std::copy_n(landing, count, to.data() + at);
  }
  // The loss over the valid rows; the row losses, and the metrics' hits or
  // the outputs, come back to pinned memory for evaluate's loss and metrics.
  template <class Batch>
  double loss(const Batch& batch) {
    check_device_label_bytes<Batch>(label_values_per_sample, training.loss->name());
    const int valid_rows = batch.valid * static_cast<int>(cuda_replica<Net>::rows_per_sample);
    const cudaStream_t s = r.compute.get();
    r.stage_labels(batch.labels.data(), 0);
    r.staging[0].copied.wait_on(s);
    float* host = r.results();
    // The metrics the device counts (backend/cuda/metric_hits.hpp) over the
    // valid rows; the outputs come back only for the others. Both before
    // the loss, which may write its gradient over the outputs.
    const bool sparse = loss_executor->form() == losses::label_form::sparse;
    bool outputs_read = false;
    rules.clear();
    for (const auto& m : training.metrics) {
      rules.push_back(m->device_hits(sparse, classes));
      outputs_read = outputs_read || !rules.back();
    }
    if (std::any_of(rules.begin(), rules.end(), [](const auto& rule) { return rule.has_value(); })) {
      unsigned long long* hits = r.hits_on_device(0);
      TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(hits, 0, rules.size() * sizeof(unsigned long long), s));
      for (std::size_t i = 0; i < rules.size(); ++i)
        if (rules[i])
          backend::cuda::count_hits(*rules[i], sparse, cuda_outputs<Net>::stored(program.output()),
                                    r.labels_on_device(0), valid_rows, classes, nullptr, 1, hits + i, s, row_stride);
      TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(r.hits_on_host(0), hits, rules.size() * sizeof(unsigned long long),
                                          cudaMemcpyDeviceToHost, s));
    }
    if (outputs_read) cuda_outputs<Net>::to_host(host + rows, program.output(), rows, s);
    cuda_outputs<Net>::record(*loss_executor, program.output(), r.labels_on_device(0), program.output_gradient(),
                              program.row_losses(), rows, valid_rows, s);
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(host, program.row_losses(), static_cast<std::size_t>(rows) * sizeof(float),
                                        cudaMemcpyDeviceToHost, s));
    r.compute.synchronize();
    double sum = 0;
    const float* weights = batch.sample_weights.empty() ? nullptr : batch.sample_weights.data();
    for (int i = 0; i < valid_rows; ++i)
      sum += static_cast<double>(r.results()[i]) *
             (weights ? weights[static_cast<std::size_t>(i) / cuda_replica<Net>::rows_per_sample] : 1.0f);
    return valid_rows > 0 ? sum / valid_rows : 0.0;
  }
  const float* outputs() const { return r.results() + rows; }
  // Metric i's hits over the batch's valid rows, where the device counted them.
  std::optional<double> metric_hits(std::size_t i) const {
    if (!rules[i]) return std::nullopt;
    return static_cast<double>(r.hits_on_host(0)[i]);
  }
  std::vector<std::optional<hit_count_rule>> rules{};  // loss()'s, per metric
};

}  // namespace typeflow

// predict's and evaluate's loops, written once for every device.
//
// An engine hands them a pass over its program for the dataset's batch size
// (cpu_engine.hpp, cuda_engine.hpp), which provides:
//
//   void forward(const Batch& batch);    // the batch's features into the input (its
//                                        //   labels, which it may lack, are not read);
//                                        //   forward in inference mode
//   void append_outputs(std::vector<float>& to, std::size_t count);
//                                        // the output's first count floats, to the host
//   double loss(const Batch& batch);     // the mean loss over the batch's valid rows
//                                        //   (the padding masked), after which
//   const float* outputs();              // the outputs are readable on the host
//
// Both loops read the dataset once, in order; evaluate's loss and metrics
// are the training_state's. Callbacks get each batch's hooks (Keras's
// on_test_batch_* and on_predict_batch_*, batch 1-based).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "typeflow/callbacks/callback.hpp"
#include "typeflow/train/label_check.hpp"
#include "typeflow/train/row_weights.hpp"
#include "typeflow/train/training_state.hpp"

namespace typeflow {

// The outputs for every sample of `data`, in order: (samples, output_shape)
// flattened. The last batch's padding is not returned; labels are not read.
template <class Net, class Data, class Pass>
std::vector<float> predict_loop(const Data& data, Pass&& pass, std::span<callback* const> callbacks = {}) {
  using batch_type = typename Data::element_type;
  constexpr std::size_t per_sample = Net::output_shape_type::size;
  std::vector<float> outputs;
  if (data.cardinality() > 0)
    outputs.reserve(static_cast<std::size_t>(data.cardinality()) * batch_type::size * per_sample);
  batch_type batch;
  auto cursor = data.open(0);
  for (std::int64_t step = 1; cursor.next(batch); ++step) {
    for (auto* c : callbacks) c->on_predict_batch_begin(step);
    pass.forward(batch);
    pass.append_outputs(outputs, static_cast<std::size_t>(batch.valid) * per_sample);
    for (auto* c : callbacks) c->on_predict_batch_end(step);
  }
  return outputs;
}

// The loss (plus `penalty`, the regularizers' part, the same for every batch)
// and the metrics over every sample of `data`, into `training`'s means.
template <class Net, class Data, class Pass>
void evaluation_loop(training_state<Net>& training, const Data& data, Pass&& pass, double penalty,
                     std::span<callback* const> callbacks = {}) {
  using batch_type = typename Data::element_type;
  constexpr std::size_t rows_per_sample = training_state<Net>::rows_per_sample;
  training.reset_metrics();
  batch_type batch;
  auto cursor = data.open(0);
  logs batch_logs;
  for (std::int64_t step = 1; cursor.next(batch); ++step) {
    for (auto* c : callbacks) c->on_test_batch_begin(step);
    const std::ptrdiff_t valid_rows = static_cast<std::ptrdiff_t>(batch.valid * rows_per_sample);
    check_labels<training_state<Net>::classes>(batch.labels.data(), valid_rows);
    check_sample_weights(batch, false, "evaluate");
    pass.forward(batch);
    training.loss_mean.update(pass.loss(batch) + penalty, batch.valid);
    training.regularization_mean.update(penalty, batch.valid);
    for (std::size_t i = 0; i < training.metrics.size(); ++i) {
      auto& m = training.metrics[i];
      if (const std::optional<double> hits = pass.metric_hits(i))  // counted on the device
        m->add_hits(*hits, valid_rows);
      else
        m->update(pass.outputs(), batch.labels.data(), valid_rows, training_state<Net>::classes);
    }
    if (!callbacks.empty()) {
      training.fill_logs(batch_logs, "");
      for (auto* c : callbacks) c->on_test_batch_end(step, batch_logs);
    }
  }
}

}  // namespace typeflow

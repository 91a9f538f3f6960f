// Keras's weights of a loss's rows, class_weight and sample_weight: each
// row's loss, and so its gradient, times its weight. The loss stays Keras's
// sum over the batch's rows divided by their count (sum_over_batch_size), so
// weights change its scale as they do in Keras; the metrics are not weighted.
//
// - fit's class_weight: the weight of the row's class (a class id; the argmax
//   of a dense target of several classes; a single unit's target rounded); a
//   class not given weighs 1. Training only.
// - sample weights (data::weighted_example, batch_of::sample_weights): one a
//   sample, over all of its rows (a sequence's tokens); fit and evaluate.
// Both at once are refused, as Keras refuses them. The CPU weighs the rows
// in its loss (cpu_engine.hpp); a GPU's captured step takes a weight a row
// from the host, which also masks a last partial batch (cuda_engine.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace typeflow {

// The weights of classes 0 .. classes - 1 from fit's map; empty when the map is.
inline std::vector<float> class_weight_table(const std::map<int, float>& given, int classes) {
  if (given.empty()) return {};
  std::vector<float> table(static_cast<std::size_t>(classes), 1.f);
  for (const auto& [id, weight] : given) {
    if (id < 0 || id >= classes)
      throw std::invalid_argument("fit: class_weight names class " + std::to_string(id) + ", but the output has classes 0.." +
                                  std::to_string(classes - 1));
    if (!(weight >= 0.f) || !std::isfinite(weight))
      throw std::invalid_argument("fit: class_weight of class " + std::to_string(id) + " is " + std::to_string(weight) +
                                  "; a weight must be finite and not negative");
    table[static_cast<std::size_t>(id)] = weight;
  }
  return table;
}

// Row r's class_weight: its class's entry of the table, or 1 for a class
// beyond it. labels: one int32 id a row, or `classes` targets a row.
template <class Label>
float class_weight_of_row(const std::vector<float>& table, const Label* labels, std::ptrdiff_t r, int classes) {
  int id;
  if constexpr (std::is_same_v<Label, std::int32_t>) {
    id = labels[r];
  } else if (classes > 1) {
    const Label* t = labels + r * classes;
    id = 0;
    for (int j = 1; j < classes; ++j) id = t[j] > t[id] ? j : id;
  } else {
    id = static_cast<int>(std::lround(labels[r]));
  }
  return id >= 0 && id < static_cast<int>(table.size()) ? table[static_cast<std::size_t>(id)] : 1.f;
}

// Multiplies each of the first valid_rows rows' loss and gradient (classes
// values a row) by its class's weight.
template <class Label>
void weight_rows_by_class(const std::vector<float>& table, const Label* labels, std::ptrdiff_t valid_rows, int classes,
                          float* row_loss, float* d_out) {
  for (std::ptrdiff_t r = 0; r < valid_rows; ++r) {
    const float w = class_weight_of_row(table, labels, r, classes);
    row_loss[r] *= w;
    for (int j = 0; j < classes; ++j) d_out[r * classes + j] *= w;
  }
}

// A batch's sample weights, checked where its labels are: (N) finite,
// non-negative values, or none; and not beside fit's class_weight.
template <class Batch>
void check_sample_weights(const Batch& batch, bool class_weights, const char* where) {
  const auto& w = batch.sample_weights;
  if (w.empty()) return;
  if (class_weights)
    throw std::invalid_argument(std::string(where) +
                                ": class_weight and sample weights together (Keras refuses them too); fold each "
                                "class's weight into its examples' weights");
  if (w.size() != static_cast<std::size_t>(Batch::size))
    throw std::invalid_argument(std::string(where) + ": a batch of " + std::to_string(Batch::size) + " carries " +
                                std::to_string(w.size()) + " sample weights; it needs one a row");
  for (std::size_t r = 0; r < w.size(); ++r)
    if (!(w[r] >= 0.f) || !std::isfinite(w[r]))
      throw std::invalid_argument(std::string(where) + ": the sample weight of row " + std::to_string(r) + " is " +
                                  std::to_string(w[r]) + "; a weight must be finite and not negative");
}

// Multiplies each of the first valid_rows rows' loss and gradient (classes
// values a row) by its sample's weight; a sample has rows_per_sample rows.
inline void weight_rows_by_sample(const float* weights, std::ptrdiff_t valid_rows, std::size_t rows_per_sample,
                                  int classes, float* row_loss, float* d_out) {
  for (std::ptrdiff_t r = 0; r < valid_rows; ++r) {
    const float w = weights[static_cast<std::size_t>(r) / rows_per_sample];
    row_loss[r] *= w;
    for (int j = 0; j < classes; ++j) d_out[r * classes + j] *= w;
  }
}

// Whether a GPU's captured step must weigh the rows of this batch: a last
// partial batch, fit's class_weight, or sample weights.
template <class Batch>
bool weighs_rows(const Batch& batch, const std::vector<float>& class_table) {
  return batch.valid < Batch::size || !class_table.empty() || !batch.sample_weights.empty();
}

// The weights of replica k's rows (shard samples of rows_per_sample rows)
// for a GPU's captured step, which takes the mean over all of its rows and
// averages the replicas' gradients: for a last partial batch 0 on padding
// and replicas * R / V on the V valid rows of the replicas' R each, so that
// the result is the mean over the valid rows (the CPU's loss takes their
// count instead); times the row's class_weight and its sample's weight.
template <class Batch>
void replica_row_weights(const Batch& batch, const std::vector<float>& class_table, int k, int replicas, int shard,
                         std::size_t rows_per_sample, int classes, int own, float* w) {
  const std::size_t rows = static_cast<std::size_t>(shard) * rows_per_sample;
  const float share = static_cast<float>(static_cast<double>(replicas) * static_cast<double>(rows) /
                                         (static_cast<double>(batch.valid) * static_cast<double>(rows_per_sample)));
  const auto* labels = batch.labels.data() + static_cast<std::size_t>(k) * static_cast<std::size_t>(shard) *
                                                 Batch::label_type::size;
  for (std::size_t i = 0; i < rows; ++i) {
    const std::size_t sample = i / rows_per_sample;
    float weight = sample < static_cast<std::size_t>(own) ? share : 0.f;
    if (!class_table.empty()) weight *= class_weight_of_row(class_table, labels, static_cast<std::ptrdiff_t>(i), classes);
    if (!batch.sample_weights.empty())
      weight *= batch.sample_weights[static_cast<std::size_t>(k) * static_cast<std::size_t>(shard) + sample];
    w[i] = weight;
  }
}

}  // namespace typeflow

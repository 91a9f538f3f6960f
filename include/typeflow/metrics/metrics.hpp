// Metrics, accumulated over an epoch and reset at its start, as in Keras.
// Each keeps its running value in state() (restore() puts it back), which a
// checkpoint written inside an epoch saves.
//
// accuracy follows Keras's resolution of 'accuracy': with class-id labels it
// is sparse categorical accuracy (argmax == id); with dense labels it is
// categorical accuracy (argmax == argmax of the target), or binary accuracy
// (output > 0.5 matches target > 0.5) for a single output unit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "typeflow/core/row_ranking.hpp"

namespace typeflow::metrics {

// What a GPU may count for a metric, so that a step sends back one number
// per metric instead of its outputs (backend/cuda/metric_hits.hpp): a
// metric whose update is a hit per row (core/row_ranking.hpp's
// hit_count_rule) says so through device_hits(); the others read the
// outputs on the host, on every device.

// Counts hits over rows; the result is hits / rows seen.
struct hit_counter {
  double hits = 0, seen = 0;
  void reset() { hits = seen = 0; }
  double result() const { return seen > 0 ? hits / seen : 0.0; }
  // What a checkpoint written inside an epoch keeps of the running value.
  std::array<double, 2> state() const { return {hits, seen}; }
  void restore(std::array<double, 2> s) { hits = s[0], seen = s[1]; }
  // A step's hits over its `rows`, counted elsewhere (a GPU).
  void add_hits(double step_hits, std::ptrdiff_t rows) {
    hits += step_hits;
    seen += static_cast<double>(rows);
  }
};

struct sparse_categorical_accuracy : hit_counter {
  static constexpr std::string_view name = "sparse_categorical_accuracy";
  static std::optional<hit_count_rule> device_hits(bool sparse_labels, int) {
    return sparse_labels ? std::optional<hit_count_rule>{hit_count_rule{}} : std::nullopt;
  }
  void update(const float* out, const std::int32_t* ids, std::ptrdiff_t valid_rows, int classes) {
    for (std::ptrdiff_t r = 0; r < valid_rows; ++r) hits += argmax_of(out + r * classes, classes) == ids[r];
    seen += static_cast<double>(valid_rows);
  }
};

struct categorical_accuracy : hit_counter {
  static constexpr std::string_view name = "categorical_accuracy";
  static std::optional<hit_count_rule> device_hits(bool sparse_labels, int) {
    return sparse_labels ? std::nullopt : std::optional<hit_count_rule>{hit_count_rule{}};
  }
  void update(const float* out, const float* targets, std::ptrdiff_t valid_rows, int classes) {
    for (std::ptrdiff_t r = 0; r < valid_rows; ++r)
      hits += argmax_of(out + r * classes, classes) == argmax_of(targets + r * classes, classes);
    seen += static_cast<double>(valid_rows);
  }
};

struct accuracy : hit_counter {
  static constexpr std::string_view name = "accuracy";
  // Binary accuracy (one output unit, dense targets) compares with 0.5 instead.
  static std::optional<hit_count_rule> device_hits(bool sparse_labels, int classes) {
    return sparse_labels || classes > 1 ? std::optional<hit_count_rule>{hit_count_rule{}} : std::nullopt;
  }
  void update(const float* out, const std::int32_t* ids, std::ptrdiff_t valid_rows, int classes) {
    for (std::ptrdiff_t r = 0; r < valid_rows; ++r) hits += argmax_of(out + r * classes, classes) == ids[r];
    seen += static_cast<double>(valid_rows);
  }
  void update(const float* out, const float* targets, std::ptrdiff_t valid_rows, int classes) {
    if (classes == 1) {
      for (std::ptrdiff_t r = 0; r < valid_rows; ++r) hits += (out[r] > 0.5f) == (targets[r] > 0.5f);
      seen += static_cast<double>(valid_rows);
      return;
    }
    for (std::ptrdiff_t r = 0; r < valid_rows; ++r)
      hits += argmax_of(out + r * classes, classes) == argmax_of(targets + r * classes, classes);
    seen += static_cast<double>(valid_rows);
  }
};

// The running mean over rows of each row's mean |y - t|^p (Keras's
// MeanSquaredError, p = 2, and MeanAbsoluteError, p = 1, as metrics).
template <int Power>
struct row_error_mean {
  double total = 0, seen = 0;
  void reset() { total = seen = 0; }
  double result() const { return seen > 0 ? total / seen : 0.0; }
  std::array<double, 2> state() const { return {total, seen}; }
  void restore(std::array<double, 2> s) { total = s[0], seen = s[1]; }
  void update(const float* out, const float* targets, std::ptrdiff_t valid_rows, int width) {
    for (std::ptrdiff_t r = 0; r < valid_rows; ++r) {
      double row = 0;
      for (int j = 0; j < width; ++j) {
        const double e = static_cast<double>(out[r * width + j]) - targets[r * width + j];
        row += Power == 2 ? e * e : (e < 0 ? -e : e);
      }
      total += row / width;
    }
    seen += static_cast<double>(valid_rows);
  }
};
struct mean_squared_error : row_error_mean<2> {
  static constexpr std::string_view name = "mean_squared_error";
};
struct mean_absolute_error : row_error_mean<1> {
  static constexpr std::string_view name = "mean_absolute_error";
};

// Whether the label's class is among the k highest outputs (Keras's
// SparseTopKCategoricalAccuracy and TopKCategoricalAccuracy, k = 5):
// sparse_top_k_categorical_accuracy{.k = 3} takes class ids, the other dense targets.
template <bool Sparse>
struct top_k_accuracy {
  int k = 5;
  double hits = 0, seen = 0;
  static constexpr std::string_view name = Sparse ? "sparse_top_k_categorical_accuracy" : "top_k_categorical_accuracy";
  void reset() { hits = seen = 0; }
  double result() const { return seen > 0 ? hits / seen : 0.0; }
  std::array<double, 2> state() const { return {hits, seen}; }
  void restore(std::array<double, 2> s) { hits = s[0], seen = s[1]; }
  std::optional<hit_count_rule> device_hits(bool sparse_labels, int) const {
    return sparse_labels == Sparse ? std::optional<hit_count_rule>{hit_count_rule{hit_rule::top_k, k}}
                                   : std::nullopt;
  }
  void add_hits(double step_hits, std::ptrdiff_t rows) {
    hits += step_hits;
    seen += static_cast<double>(rows);
  }
  void update(const float* out, const std::int32_t* ids, std::ptrdiff_t valid_rows, int classes)
    requires Sparse
  {
    for (std::ptrdiff_t r = 0; r < valid_rows; ++r) hits += in_top_k(out + r * classes, classes, ids[r], k);
    seen += static_cast<double>(valid_rows);
  }
  void update(const float* out, const float* targets, std::ptrdiff_t valid_rows, int classes)
    requires(!Sparse)
  {
    for (std::ptrdiff_t r = 0; r < valid_rows; ++r)
      hits += in_top_k(out + r * classes, classes, argmax_of(targets + r * classes, classes), k);
    seen += static_cast<double>(valid_rows);
  }
};
using sparse_top_k_categorical_accuracy = top_k_accuracy<true>;
using top_k_categorical_accuracy = top_k_accuracy<false>;

// Binary counts over every output value against its target, as Keras's
// confusion metrics count them: a target is positive when it is not 0, a
// prediction when it is above the threshold (precision{.threshold = 0.f}
// for logits). f1_score is 2 P R / (P + R) (Keras's F1Score, average "micro").
enum class confusion_ratio { precision, recall, f1 };
template <confusion_ratio Ratio>
struct confusion_metric {
  float threshold = 0.5f;
  double true_positives = 0, false_positives = 0, false_negatives = 0;
  static constexpr std::string_view name = Ratio == confusion_ratio::precision ? "precision"
                                           : Ratio == confusion_ratio::recall  ? "recall"
                                                                                : "f1_score";
  void reset() { true_positives = false_positives = false_negatives = 0; }
  std::array<double, 3> state() const { return {true_positives, false_positives, false_negatives}; }
  void restore(std::array<double, 3> s) { true_positives = s[0], false_positives = s[1], false_negatives = s[2]; }
  void update(const float* out, const float* targets, std::ptrdiff_t valid_rows, int width) {
    for (std::ptrdiff_t i = 0; i < valid_rows * width; ++i) {
      const bool predicted = out[i] > threshold, actual = targets[i] != 0.f;
      true_positives += predicted && actual;
      false_positives += predicted && !actual;
      false_negatives += !predicted && actual;
    }
  }
  double result() const {
    const auto ratio = [](double n, double d) { return d > 0 ? n / d : 0.0; };
    const double p = ratio(true_positives, true_positives + false_positives);
    const double r = ratio(true_positives, true_positives + false_negatives);
    if constexpr (Ratio == confusion_ratio::precision) return p;
    if constexpr (Ratio == confusion_ratio::recall) return r;
    return ratio(2 * p * r, p + r);
  }
};
using precision = confusion_metric<confusion_ratio::precision>;
using recall = confusion_metric<confusion_ratio::recall>;
using f1_score = confusion_metric<confusion_ratio::f1>;

// Keras's AUC (the ROC curve, its default): the counts at 200 thresholds,
// 0 - 1e-7, 1/199, ..., 198/199, 1 + 1e-7, then the trapezoids under
// (false positive rate, recall). Targets as in confusion_metric; outputs are probabilities.
struct auc {
  static constexpr std::string_view name = "auc";
  static constexpr int thresholds = 200;
  // true positives, false positives, true negatives, false negatives at each threshold
  std::array<double, 4 * thresholds> counts{};
  void reset() { counts.fill(0); }
  std::array<double, 4 * thresholds> state() const { return counts; }
  void restore(const std::array<double, 4 * thresholds>& s) { counts = s; }
  static double threshold(int i) {
    constexpr double epsilon = 1e-7;
    return i == 0 ? -epsilon : (i == thresholds - 1 ? 1 + epsilon : static_cast<double>(i) / (thresholds - 1));
  }
  void update(const float* out, const float* targets, std::ptrdiff_t valid_rows, int width) {
    for (std::ptrdiff_t v = 0; v < valid_rows * width; ++v) {
      const bool actual = targets[v] != 0.f;
      for (int i = 0; i < thresholds; ++i) {
        const bool predicted = out[v] > threshold(i);
        counts[4 * i + (actual ? (predicted ? 0 : 3) : (predicted ? 1 : 2))] += 1;
      }
    }
  }
  double result() const {
    double area = 0;
    for (int i = 0; i + 1 < thresholds; ++i) {
      const auto rate = [&](int k, int hit, int miss) {
        const double d = counts[4 * k + hit] + counts[4 * k + miss];
        return d > 0 ? counts[4 * k + hit] / d : 0.0;
      };
      const double x0 = rate(i, 1, 2), x1 = rate(i + 1, 1, 2);  // false positive rate
      const double y0 = rate(i, 0, 3), y1 = rate(i + 1, 0, 3);  // recall
      area += (x0 - x1) * (y0 + y1) / 2;
    }
    return area;
  }
};

// The running mean of a value weighted by sample counts: how fit reports "loss".
struct mean {
  double total = 0, weight = 0;
  void reset() { total = weight = 0; }
  void update(double value, double count) {
    total += value * count;
    weight += count;
  }
  double result() const { return weight > 0 ? total / weight : 0.0; }
  std::array<double, 2> state() const { return {total, weight}; }
  void restore(std::array<double, 2> s) { total = s[0], weight = s[1]; }
};

}  // namespace typeflow::metrics

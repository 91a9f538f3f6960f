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
#include <string_view>

namespace typeflow::metrics {

namespace detail {
inline int argmax(const float* row, int n) {
  int best = 0;
  for (int j = 1; j < n; ++j)
    if (row[j] > row[best]) best = j;
  return best;
}
}  // namespace detail

// Counts hits over rows; the result is hits / rows seen.
struct hit_counter {
  double hits = 0, seen = 0;
  void reset() { hits = seen = 0; }
  double result() const { return seen > 0 ? hits / seen : 0.0; }
  // What a checkpoint written inside an epoch keeps of the running value.
  std::array<double, 2> state() const { return {hits, seen}; }
  void restore(std::array<double, 2> s) { hits = s[0], seen = s[1]; }
};

struct sparse_categorical_accuracy : hit_counter {
  static constexpr std::string_view name = "sparse_categorical_accuracy";
  void update(const float* out, const std::int32_t* ids, std::ptrdiff_t valid_rows, int classes) {
    for (std::ptrdiff_t r = 0; r < valid_rows; ++r) hits += detail::argmax(out + r * classes, classes) == ids[r];
    seen += static_cast<double>(valid_rows);
  }
};

struct categorical_accuracy : hit_counter {
  static constexpr std::string_view name = "categorical_accuracy";
  void update(const float* out, const float* targets, std::ptrdiff_t valid_rows, int classes) {
    for (std::ptrdiff_t r = 0; r < valid_rows; ++r)
      hits += detail::argmax(out + r * classes, classes) == detail::argmax(targets + r * classes, classes);
    seen += static_cast<double>(valid_rows);
  }
};

struct accuracy : hit_counter {
  static constexpr std::string_view name = "accuracy";
  void update(const float* out, const std::int32_t* ids, std::ptrdiff_t valid_rows, int classes) {
    for (std::ptrdiff_t r = 0; r < valid_rows; ++r) hits += detail::argmax(out + r * classes, classes) == ids[r];
    seen += static_cast<double>(valid_rows);
  }
  void update(const float* out, const float* targets, std::ptrdiff_t valid_rows, int classes) {
    if (classes == 1) {
      for (std::ptrdiff_t r = 0; r < valid_rows; ++r) hits += (out[r] > 0.5f) == (targets[r] > 0.5f);
      seen += static_cast<double>(valid_rows);
      return;
    }
    for (std::ptrdiff_t r = 0; r < valid_rows; ++r)
      hits += detail::argmax(out + r * classes, classes) == detail::argmax(targets + r * classes, classes);
    seen += static_cast<double>(valid_rows);
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

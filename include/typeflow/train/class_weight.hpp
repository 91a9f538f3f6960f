// fit's class_weight, as Keras's: each training row's loss, and so its
// gradient, times the weight of its class (a class id; the argmax of a dense
// target of several classes; a single unit's target rounded). A class not
// given weighs 1. The loss stays Keras's sum over the batch's rows divided by
// their count, so weights change its scale as they do in Keras; evaluate and
// the metrics are not weighted.
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

// Multiplies each of the first valid_rows rows' loss and gradient (classes
// values a row) by its class's weight.
template <class Label>
void weight_rows_by_class(const std::vector<float>& table, const Label* labels, std::ptrdiff_t valid_rows, int classes,
                          float* row_loss, float* d_out) {
  const int count = static_cast<int>(table.size());
  for (std::ptrdiff_t r = 0; r < valid_rows; ++r) {
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
    const float w = id >= 0 && id < count ? table[static_cast<std::size_t>(id)] : 1.f;
    row_loss[r] *= w;
    for (int j = 0; j < classes; ++j) d_out[r * classes + j] *= w;
  }
}

}  // namespace typeflow

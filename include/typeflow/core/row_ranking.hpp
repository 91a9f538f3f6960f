// Where a row's values rank: its argmax, and how many values exceed one of
// them (top-k), in a form that a scan and a GPU warp compute alike.
//
// The metrics (metrics/metrics.hpp) scan a row from column 0 on the CPU; the
// GPU's hit count (backend/cuda/kernels/metric_hits.cuh) gives each of a
// warp's lanes every 32nd column and merges the lanes' candidates. The
// answer is the scan's either way, NaN included:
//   argmax   the first column of the largest value; a NaN never wins, but a
//            NaN in column 0 keeps 0 (the scan starts there and nothing
//            compares greater than a NaN);
//   greater  the columns whose value is strictly greater than `value` (a
//            count: any order of the lanes adds up to the same).
// merge() is a maximum over (value, -column), so the lanes' candidates may
// be merged in any order; the CPU test replays the warp's butterfly.
#pragma once

#include "typeflow/core/host_device.hpp"

namespace typeflow {

// A hit per row, as the accuracy metrics count them: the row's argmax is the
// label's class, or the label's class is among the row's k largest; the
// label's class is its id, or the argmax of a dense target row.
enum class hit_rule { argmax, top_k };
struct hit_count_rule {
  hit_rule rule = hit_rule::argmax;
  int k = 1;
};

// A lane's best column so far; column -1: none yet (or only NaNs).
struct argmax_candidate {
  float value = 0.f;
  int column = -1;
};

TYPEFLOW_HOST_DEVICE argmax_candidate merge(argmax_candidate a, argmax_candidate b) {
  if (b.column < 0) return a;
  if (a.column < 0) return b;
  return b.value > a.value || (b.value == a.value && b.column < a.column) ? b : a;
}

// The best of columns lane, lane + lanes, ... of a row of n. T: float, or
// bf16 (a GPU's logits under mixed_bfloat16), compared as floats.
template <class T>
TYPEFLOW_HOST_DEVICE argmax_candidate lane_argmax(const T* row, int n, int lane, int lanes) {
  argmax_candidate best;
  for (int j = lane; j < n; j += lanes) {
    const float v = static_cast<float>(row[j]);
    if (v == v && (best.column < 0 || v > best.value)) best = {v, j};  // columns rise: the first of equals stays
  }
  return best;
}

// The merged candidates' column, as the scan gives it.
template <class T>
TYPEFLOW_HOST_DEVICE int argmax_column(const T* row, argmax_candidate merged) {
  const float first = static_cast<float>(row[0]);
  return first != first || merged.column < 0 ? 0 : merged.column;
}

template <class T>
TYPEFLOW_HOST_DEVICE int argmax_of(const T* row, int n) { return argmax_column(row, lane_argmax(row, n, 0, 1)); }

// Of columns lane, lane + lanes, ...: how many hold a value greater than `value`.
template <class T>
TYPEFLOW_HOST_DEVICE int lane_count_greater(const T* row, int n, float value, int lane, int lanes) {
  int greater = 0;
  for (int j = lane; j < n; j += lanes) greater += static_cast<float>(row[j]) > value;
  return greater;
}

// Whether column `target` is among the row's k largest: fewer than k values
// are strictly greater (ties count in its favour, as Keras's in_top_k).
template <class T>
TYPEFLOW_HOST_DEVICE bool in_top_k(const T* row, int n, int target, int k) {
  return lane_count_greater(row, n, static_cast<float>(row[target]), 0, 1) < k;
}

}  // namespace typeflow

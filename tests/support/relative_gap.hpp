// How far a result is from a reference: the largest |a - b| over the
// largest |b| (0 when they are equal), for the replays of the GPU's kernels
// against the CPU layers (tests/unit/*_rows_test.cpp, tests/cuda/).
#pragma once

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace typeflow::testing {

inline double relative_gap(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("relative_gap: the two results differ in size");
  double gap = 0, size = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    gap = std::max(gap, std::fabs(static_cast<double>(a[i]) - b[i]));
    size = std::max(size, std::fabs(static_cast<double>(b[i])));
  }
  return size > 0 ? gap / size : gap;
}

}  // namespace typeflow::testing

// first_outside(ids, n, bound): where the first of n int32 ids lies outside
// [0, bound), or -1: one vectorised pass for the common case that all are
// inside, then a scalar one to find the place. Class labels and token ids
// are checked with it before anything reads them as indices.
#pragma once

#include <cstddef>
#include <cstdint>

namespace typeflow {

inline std::ptrdiff_t first_outside(const std::int32_t* ids, std::ptrdiff_t n, int bound) {
  int outside = 0;
#pragma omp simd reduction(| : outside)
  for (std::ptrdiff_t i = 0; i < n; ++i) outside |= static_cast<std::uint32_t>(ids[i]) >= static_cast<std::uint32_t>(bound);
  if (!outside) return -1;
  for (std::ptrdiff_t i = 0; i < n; ++i)
    if (static_cast<std::uint32_t>(ids[i]) >= static_cast<std::uint32_t>(bound)) return i;
  return -1;
}

}  // namespace typeflow

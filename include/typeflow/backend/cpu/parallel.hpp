// Element-wise loops over the cores (OpenMP, the runtime oneDNN also uses, so
// both share one thread team instead of fighting over the two cores).
#pragma once

#include <cstddef>

namespace typeflow::backend::cpu {

// Below this many elements a loop runs on the calling thread: waking the
// team costs more than the work.
inline constexpr std::ptrdiff_t parallel_threshold = 1 << 15;

// f(i) for i in [0, n), split over the cores, vectorisable by the compiler.
// Each thread runs its own copy of f: a functor the loop reaches through a
// shared reference would have its captured pointers reloaded at every
// element, which keeps g++ from vectorising the loop at all.
template <class F>
inline void parallel_for(std::ptrdiff_t n, F&& f) {
#pragma omp parallel if (n >= parallel_threshold)
  {
    auto local = f;
#pragma omp for simd schedule(static)
    for (std::ptrdiff_t i = 0; i < n; ++i) local(i);
  }
}

// f(r) for each row r in [0, rows), rows split over the cores.
template <class F>
inline void parallel_rows(std::ptrdiff_t rows, std::ptrdiff_t row_size, F&& f) {
#pragma omp parallel for schedule(static) if (rows * row_size >= parallel_threshold)
  for (std::ptrdiff_t r = 0; r < rows; ++r) f(r);
}

// out[c] = the sum over the rows of m (rows, cols), row-major: a bias's
// gradient. Threads take blocks of 64 columns, so no two write one sum.
inline void column_sums(const float* m, std::ptrdiff_t rows, int cols, float* out) {
#pragma omp parallel for schedule(static) if (rows * cols >= parallel_threshold)
  for (int c0 = 0; c0 < cols; c0 += 64) {
    const int c1 = c0 + 64 < cols ? c0 + 64 : cols;
    float sums[64] = {};
    for (std::ptrdiff_t r = 0; r < rows; ++r) {
      const float* row = m + r * cols;
#pragma omp simd
      for (int c = c0; c < c1; ++c) sums[c - c0] += row[c];
    }
    for (int c = c0; c < c1; ++c) out[c] = sums[c - c0];
  }
}

}  // namespace typeflow::backend::cpu

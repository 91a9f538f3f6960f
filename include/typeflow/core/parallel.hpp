// Element-wise loops over the cores (OpenMP, the runtime oneDNN also uses, so
// both share one thread team instead of fighting over the two cores): the
// parallel primitive of everything that loops over arrays on the CPU
// (layers' executors, losses, optimizers, precision's conversions).
#pragma once

#include <algorithm>
#include <cstddef>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace typeflow {

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
// gradient. Each thread sums a contiguous share of the columns (a multiple
// of 16) over all the rows, up to 1024 columns at a time in a local array,
// so every column is summed over the rows in order, whatever the thread
// count, and each row's share is read as one run. (Blocks of 64 columns
// read 256 bytes of each row and then jumped to the next: 20-30% slower at
// 16384 rows of 384-1536 columns on 2 Zen 4 cores.)
inline void column_sums(const float* m, std::ptrdiff_t rows, int cols, float* out) {
  constexpr int slab = 1024;
#pragma omp parallel if (rows * cols >= parallel_threshold)
  {
    int threads = 1, thread = 0;
#ifdef _OPENMP
    threads = omp_get_num_threads();
    thread = omp_get_thread_num();
#endif
    const int share = ((cols + threads - 1) / threads + 15) / 16 * 16;
    const int begin = std::min(cols, thread * share), end = std::min(cols, begin + share);
    for (int c0 = begin; c0 < end; c0 += slab) {
      const int width = std::min(slab, end - c0);
      alignas(64) float sums[slab];
      for (int c = 0; c < width; ++c) sums[c] = 0.f;
      for (std::ptrdiff_t r = 0; r < rows; ++r) {
        const float* row = m + r * cols + c0;
#pragma omp simd
        for (int c = 0; c < width; ++c) sums[c] += row[c];
      }
      for (int c = 0; c < width; ++c) out[c0 + c] = sums[c];
    }
  }
}

}  // namespace typeflow

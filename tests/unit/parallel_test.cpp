// core/parallel.hpp: column_sums, a bias's gradient, against sums
// over the rows in order written out: each column is summed in that order
// whatever the thread count, so the two agree bit for bit.
#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include <typeflow/core/parallel.hpp>
#include <typeflow/core/random.hpp>

namespace tf = typeflow;

TEST_CASE("column_sums equals each column summed over the rows in order, for any width") {
  // Widths under one SIMD vector, around a thread's share and the 1024-column
  // slab; rows enough that the larger shapes run on every thread.
  for (const int cols : {1, 10, 16, 17, 64, 65, 384, 1030, 2100})
    for (const std::ptrdiff_t rows : {1, 7, 300}) {
      CAPTURE(cols);
      CAPTURE(rows);
      std::vector<float> m(static_cast<std::size_t>(rows * cols));
      for (std::size_t i = 0; i < m.size(); ++i) m[i] = tf::random_stream{77, 0}.uniform(i) * 2.f - 1.f;
      std::vector<float> expected(static_cast<std::size_t>(cols), 0.f), out(static_cast<std::size_t>(cols) + 3, -7.f);
      for (std::ptrdiff_t r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) expected[c] += m[r * cols + c];
      tf::column_sums(m.data(), rows, cols, out.data());
      bool same = true;
      for (int c = 0; c < cols; ++c) same = same && out[c] == expected[c];
      CHECK(same);
      CHECK(out[cols] == -7.f);  // nothing written past the columns
    }
}

// The embeddings' GPU kernels (backend/cuda/kernels/embedding.cuh) replayed
// on the CPU in their thread layout, through the arithmetic they run
// (core/embedding_rows.hpp), against the CPU layers' own code
// (backend/cpu/embedding.hpp): the gradients must agree to the bit, since
// the kernels add in the CPU's order. The GPU test (tests/cuda/
// embedding_test.cpp) runs the kernels themselves where a device exists.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "typeflow/backend/cpu/embedding.hpp"
#include "typeflow/core/embedding_rows.hpp"

namespace tf = typeflow;
namespace er = typeflow::embedding_rows;

namespace {

std::vector<float> uniform(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// embedding_backward's kernels: keys (an id outside [0, vocab) becomes
// vocab), a stable sort of (key, row) as CUB's radix sort gives, then one
// block per sorted position, a thread per column.
void replay_embedding_backward(const std::vector<std::int32_t>& ids, const std::vector<float>& d_out,
                               std::vector<float>& d_table, std::size_t stride, int dim, int vocab) {
  const int rows = static_cast<int>(ids.size());
  std::vector<std::int32_t> keys(ids.size()), rows_of(ids.size());
  for (int i = 0; i < rows; ++i) keys[i] = ids[i] >= 0 && ids[i] < vocab ? ids[i] : vocab;
  std::iota(rows_of.begin(), rows_of.end(), 0);
  std::stable_sort(rows_of.begin(), rows_of.end(), [&](int a, int b) { return keys[a] < keys[b]; });
  std::vector<std::int32_t> sorted(ids.size());
  for (int i = 0; i < rows; ++i) sorted[i] = keys[rows_of[i]];
  for (int block = 0; block < rows; ++block) {
    if (!er::starts_run(sorted.data(), block) || sorted[block] >= vocab) continue;
    const int end = er::run_end(sorted.data(), block, rows);
    float* g = d_table.data() + static_cast<std::size_t>(sorted[block]) * stride;
    for (int c = 0; c < dim; ++c) g[c] = er::add_run(g[c], rows_of.data(), block, end, d_out.data(), dim, c);
  }
}

}  // namespace

TEST_CASE("embedding backward: sorted runs give the CPU scatter's bits, from zero and over tied_logits' part") {
  struct shape {
    int rows, dim, vocab;
    std::size_t stride;
  };
  const shape shapes[] = {{1, 1, 1, 1}, {37, 5, 3, 8}, {300, 33, 7, 48}, {256, 64, 1000, 64}, {64, 17, 2, 32}};
  std::uint32_t seed = 1;
  for (const shape& s : shapes) {
    CAPTURE(s.rows);
    CAPTURE(s.vocab);
    std::mt19937 rng(seed++);
    std::uniform_int_distribution<int> id(0, s.vocab - 1);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(s.rows));
    for (auto& i : ids) i = id(rng);
    const auto d_out = uniform(static_cast<std::size_t>(s.rows) * s.dim, seed++);
    for (bool tied : {false, true}) {
      // The tied_logits' product wrote the table's gradient first, or it starts at zero.
      std::vector<float> start = tied ? uniform(static_cast<std::size_t>(s.vocab) * s.stride, seed++)
                                      : std::vector<float>(static_cast<std::size_t>(s.vocab) * s.stride, 0.f);
      std::vector<float> cpu = start, gpu = start;
      tf::detail::scatter_add_rows(cpu.data(), s.stride, ids.data(), d_out.data(), s.rows, s.dim);
      replay_embedding_backward(ids, d_out, gpu, s.stride, s.dim, s.vocab);
      REQUIRE(cpu.size() == gpu.size());
      CHECK(std::memcmp(cpu.data(), gpu.data(), cpu.size() * sizeof(float)) == 0);
      CHECK(cpu != start);  // the rows did reach the table
    }
  }
}

TEST_CASE("embedding backward: an id outside the vocabulary is left out, not written anywhere") {
  constexpr int dim = 4, vocab = 5;
  constexpr std::size_t stride = 4;
  const std::vector<std::int32_t> ids{3, 9, 0, -2, 3, 5, 0};
  const auto d_out = uniform(ids.size() * dim, 11);
  std::vector<float> gpu(vocab * stride, 0.f);
  replay_embedding_backward(ids, d_out, gpu, stride, dim, vocab);
  // The CPU scatter over the valid rows only.
  std::vector<std::int32_t> valid_ids;
  std::vector<float> valid_rows;
  for (std::size_t r = 0; r < ids.size(); ++r)
    if (ids[r] >= 0 && ids[r] < vocab) {
      valid_ids.push_back(ids[r]);
      valid_rows.insert(valid_rows.end(), d_out.begin() + static_cast<std::ptrdiff_t>(r * dim),
                        d_out.begin() + static_cast<std::ptrdiff_t>((r + 1) * dim));
    }
  std::vector<float> cpu(vocab * stride, 0.f);
  tf::detail::scatter_add_rows(cpu.data(), stride, valid_ids.data(), valid_rows.data(),
                               static_cast<std::ptrdiff_t>(valid_ids.size()), dim);
  CHECK(std::memcmp(cpu.data(), gpu.data(), cpu.size() * sizeof(float)) == 0);
  // Rows of ids no sample took stay zero.
  for (int id : {1, 2, 4})
    for (int c = 0; c < dim; ++c) CHECK(gpu[id * stride + c] == 0.f);
}

TEST_CASE("embedding forward: a row per id as stored, zeros for an id outside the table") {
  constexpr int dim = 3, vocab = 4;
  constexpr std::size_t stride = 8;
  const auto table = uniform(vocab * stride, 5);
  for (std::int32_t id : {0, 2, 3})
    for (int c = 0; c < dim; ++c) CHECK(er::gathered(table.data(), stride, id, vocab, c) == table[id * stride + c]);
  for (std::int32_t id : {-1, 4, 1 << 30})
    for (int c = 0; c < dim; ++c) CHECK(er::gathered(table.data(), stride, id, vocab, c) == 0.f);
}

TEST_CASE("positional_embedding backward: a thread per (position, column) gives the CPU layer's bits") {
  struct shape {
    int batch, length, dim;
    std::size_t stride;
  };
  const shape shapes[] = {{1, 1, 1, 1}, {4, 6, 8, 16}, {13, 9, 33, 48}, {32, 64, 16, 16}};
  std::uint32_t seed = 40;
  for (const shape& s : shapes) {
    CAPTURE(s.batch);
    CAPTURE(s.length);
    const auto d_out = uniform(static_cast<std::size_t>(s.batch) * s.length * s.dim, seed++);
    std::vector<float> cpu(static_cast<std::size_t>(s.length) * s.stride, 0.f), gpu = cpu;
    tf::detail::sum_positions(cpu.data(), s.stride, d_out.data(), s.batch, s.length, s.dim);
    for (int t = 0; t < s.length; ++t)
      for (int c = 0; c < s.dim; ++c)
        gpu[static_cast<std::size_t>(t) * s.stride + c] =
            er::summed_positions(d_out.data(), s.batch, s.length, s.dim, t, c);
    CHECK(std::memcmp(cpu.data(), gpu.data(), cpu.size() * sizeof(float)) == 0);
    if (s.batch > 1) CHECK(gpu[0] != d_out[0]);  // a sum, not a copy of the first sample
  }
}

TEST_CASE("check_token_ids names the first id outside the vocabulary by sample and position") {
  const std::vector<std::int32_t> good{0, 1, 2, 3, 4, 0};
  CHECK_NOTHROW(tf::check_token_ids<5, 8>(good.data(), 6, 3));
  std::vector<std::int32_t> bad = good;
  bad[4] = 7;
  bad[5] = -1;
  try {
    tf::check_token_ids<5, 8>(bad.data(), 6, 3);
    FAIL("no exception");
  } catch (const std::out_of_range& e) {
    const std::string what = e.what();
    CHECK(what.find("embedding<5, 8>: token id 7 at sample 1, position 1") != std::string::npos);
    CHECK(what.find("[0, 5)") != std::string::npos);
  }
}

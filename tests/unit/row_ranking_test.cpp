// core/row_ranking.hpp as the GPU's hit count runs it (backend/cuda/kernels/
// metric_hits.cuh): a warp's 32 lanes each scan every 32nd column and the
// butterfly merges them. Replayed here in that layout against the scan the
// metrics ran before (the first largest value, NaN never winning unless in
// column 0), with ties, NaNs and infinities, and the whole kernel's rows,
// blocks and partial batches against the CPU metrics' own counts.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "typeflow/core/half.hpp"
#include "typeflow/core/row_ranking.hpp"
#include "typeflow/metrics/metrics.hpp"

namespace tf = typeflow;

namespace {

constexpr int lanes = 32;

// The scan metrics.hpp ran before core/row_ranking.hpp.
int scanned_argmax(const float* row, int n) {
  int best = 0;
  for (int j = 1; j < n; ++j)
    if (row[j] > row[best]) best = j;
  return best;
}

// The kernel's warp_argmax: __shfl_xor_sync at offsets 16, 8, 4, 2, 1; every
// lane ends with the same candidate. T: float, or a GPU head's bf16 logits.
template <class T>
int warp_argmax(const T* row, int n) {
  std::array<tf::argmax_candidate, lanes> c;
  for (int l = 0; l < lanes; ++l) c[static_cast<std::size_t>(l)] = tf::lane_argmax(row, n, l, lanes);
  for (int offset = lanes / 2; offset > 0; offset /= 2) {
    std::array<tf::argmax_candidate, lanes> next;
    for (int l = 0; l < lanes; ++l)
      next[static_cast<std::size_t>(l)] =
          tf::merge(c[static_cast<std::size_t>(l)], c[static_cast<std::size_t>(l ^ offset)]);
    c = next;
  }
  for (int l = 1; l < lanes; ++l) REQUIRE(c[static_cast<std::size_t>(l)].column == c[0].column);
  return tf::argmax_column(row, c[0]);
}

template <class T>
int warp_count_greater(const T* row, int n, float value) {
  int greater = 0;
  for (int l = 0; l < lanes; ++l) greater += tf::lane_count_greater(row, n, value, l, lanes);
  return greater;
}

// Rows drawn from few values (ties), with NaNs and infinities sprinkled in.
std::vector<float> hostile_rows(int rows, int n, std::mt19937& gen, bool specials) {
  std::uniform_int_distribution<int> level(0, 6), special(0, 19);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> v(static_cast<std::size_t>(rows) * static_cast<std::size_t>(n));
  for (float& x : v) {
    x = static_cast<float>(level(gen)) * 0.5f - 1.f;
    if (!specials) continue;
    switch (special(gen)) {
      case 0: x = nan; break;
      case 1: x = inf; break;
      case 2: x = -inf; break;
      default: break;
    }
  }
  return v;
}

// The whole kernel: 256-thread blocks of 8 warps, at most 4096 blocks, each
// warp taking rows warp, warp + 8 x blocks, ... of those counted.
template <bool Sparse>
unsigned long long replay_hits(tf::hit_count_rule rule, const float* out, const void* labels, int rows, int classes,
                               std::optional<int> valid_samples, int rows_per_sample) {
  constexpr int warps = 8;
  int counted = rows;
  if (valid_samples && *valid_samples >= 0 && *valid_samples * rows_per_sample < rows)
    counted = *valid_samples * rows_per_sample;
  const int blocks = std::min((rows + warps - 1) / warps, 4096);
  unsigned long long hits = 0;
  for (int b = 0; b < blocks; ++b)
    for (int w = 0; w < warps; ++w)
      for (int r = b * warps + w; r < counted; r += blocks * warps) {
        const std::size_t at = static_cast<std::size_t>(r) * static_cast<std::size_t>(classes);
        const int target = Sparse ? static_cast<const std::int32_t*>(labels)[r]
                                  : warp_argmax(static_cast<const float*>(labels) + at, classes);
        const bool hit = rule.rule == tf::hit_rule::argmax
                             ? warp_argmax(out + at, classes) == target
                             : warp_count_greater(out + at, classes, out[at + static_cast<std::size_t>(target)]) < rule.k;
        hits += hit;
      }
  return hits;
}

}  // namespace

TEST_CASE("a warp's argmax and count of greater values are the scan's, with ties, NaNs and infinities") {
  std::mt19937 gen(11);
  for (int n : {1, 2, 5, 31, 32, 33, 64, 100, 1000}) {
    for (bool specials : {false, true}) {
      const int rows = 200;
      const std::vector<float> v = hostile_rows(rows, n, gen, specials);
      for (int r = 0; r < rows; ++r) {
        const float* row = v.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(n);
        const int expected = scanned_argmax(row, n);
        CHECK(tf::argmax_of(row, n) == expected);
        CHECK(warp_argmax(row, n) == expected);
        for (int target : {0, n / 2, n - 1}) {
          int scanned = 0;
          for (int j = 0; j < n; ++j) scanned += row[j] > row[target];
          CHECK(warp_count_greater(row, n, row[target]) == scanned);
          CHECK(tf::in_top_k(row, n, target, 3) == (scanned < 3));
        }
      }
    }
  }
  // The corners: a NaN in column 0 keeps it; a NaN elsewhere never wins.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float first_nan[] = {nan, 5.f, 7.f}, later_nan[] = {1.f, nan, 0.5f}, all_nan[] = {nan, nan};
  const float minus_inf[] = {-inf, -inf, -inf}, ties[] = {2.f, 3.f, 3.f, 1.f};
  CHECK(warp_argmax(first_nan, 3) == 0);
  CHECK(warp_argmax(later_nan, 3) == 0);
  CHECK(warp_argmax(all_nan, 2) == 0);
  CHECK(warp_argmax(minus_inf, 3) == 0);
  CHECK(warp_argmax(ties, 4) == 1);
}

TEST_CASE("over bf16 logits the warp compares the values as floats: the scan of the converted row") {
  std::mt19937 gen(13);
  std::normal_distribution<float> logit(0.f, 3.f);
  for (int n : {5, 50, 1000, 50257}) {
    CAPTURE(n);
    for (int r = 0; r < 20; ++r) {
      std::vector<tf::bf16> row(static_cast<std::size_t>(n));
      std::vector<float> as_float(row.size());
      for (std::size_t j = 0; j < row.size(); ++j) {
        row[j] = tf::bf16(logit(gen));  // bf16's 8 bits: many ties among 50257 values
        as_float[j] = static_cast<float>(row[j]);
      }
      CHECK(warp_argmax(row.data(), n) == scanned_argmax(as_float.data(), n));
      for (int target : {0, n / 3, n - 1}) {
        const float value = as_float[static_cast<std::size_t>(target)];
        int scanned = 0;
        for (const float x : as_float) scanned += x > value;
        CHECK(warp_count_greater(row.data(), n, value) == scanned);
        CHECK(tf::in_top_k(row.data(), n, target, 5) == (scanned < 5));
      }
    }
  }
}

TEST_CASE("the GPU's hit count, replayed in its blocks and warps, is the CPU metrics' count over the valid rows") {
  std::mt19937 gen(5);
  const int classes = 37, rows_per_sample = 3, samples = 40, rows = samples * rows_per_sample;
  const std::vector<float> out = hostile_rows(rows, classes, gen, false);
  const std::vector<float> targets = hostile_rows(rows, classes, gen, false);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(rows));
  std::uniform_int_distribution<int> id(0, classes - 1);
  for (auto& i : ids) i = id(gen);

  for (std::optional<int> valid : {std::optional<int>{}, std::optional<int>{-1}, std::optional<int>{40},
                                   std::optional<int>{17}, std::optional<int>{0}}) {
    CAPTURE(valid.value_or(-2));
    const int counted = valid && *valid >= 0 ? *valid * rows_per_sample : rows;

    tf::metrics::sparse_categorical_accuracy sparse;
    sparse.update(out.data(), ids.data(), counted, classes);
    const auto sparse_rule = sparse.device_hits(true, classes);
    REQUIRE(sparse_rule);
    CHECK(replay_hits<true>(*sparse_rule, out.data(), ids.data(), rows, classes, valid, rows_per_sample) ==
          static_cast<unsigned long long>(sparse.hits));

    tf::metrics::categorical_accuracy dense;
    dense.update(out.data(), targets.data(), counted, classes);
    const auto dense_rule = dense.device_hits(false, classes);
    REQUIRE(dense_rule);
    CHECK(replay_hits<false>(*dense_rule, out.data(), targets.data(), rows, classes, valid, rows_per_sample) ==
          static_cast<unsigned long long>(dense.hits));

    tf::metrics::sparse_top_k_categorical_accuracy top{.k = 4};
    top.update(out.data(), ids.data(), counted, classes);
    const auto top_rule = top.device_hits(true, classes);
    REQUIRE(top_rule);
    CHECK(top_rule->k == 4);
    CHECK(replay_hits<true>(*top_rule, out.data(), ids.data(), rows, classes, valid, rows_per_sample) ==
          static_cast<unsigned long long>(top.hits));

    tf::metrics::top_k_categorical_accuracy dense_top{.k = 2};
    dense_top.update(out.data(), targets.data(), counted, classes);
    CHECK(replay_hits<false>(*dense_top.device_hits(false, classes), out.data(), targets.data(), rows, classes, valid,
                             rows_per_sample) == static_cast<unsigned long long>(dense_top.hits));
  }
}

TEST_CASE("which metrics a GPU counts: the hit metrics for the labels they take, not binary accuracy nor the others") {
  CHECK(tf::metrics::accuracy::device_hits(true, 10));
  CHECK(tf::metrics::accuracy::device_hits(false, 10));
  CHECK_FALSE(tf::metrics::accuracy::device_hits(false, 1));  // binary: output > 0.5
  CHECK_FALSE(tf::metrics::sparse_categorical_accuracy::device_hits(false, 10));
  CHECK_FALSE(tf::metrics::categorical_accuracy::device_hits(true, 10));
  CHECK_FALSE(tf::metrics::sparse_top_k_categorical_accuracy{}.device_hits(false, 10));
  CHECK_FALSE(tf::metrics::top_k_categorical_accuracy{}.device_hits(true, 10));
  CHECK(tf::metrics::sparse_top_k_categorical_accuracy{}.device_hits(true, 10)->k == 5);

  // add_hits folds a step's count in as update would have.
  tf::metrics::accuracy a;
  a.add_hits(3, 4);
  a.add_hits(1, 4);
  CHECK(a.result() == doctest::Approx(0.5));
}

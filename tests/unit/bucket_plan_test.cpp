// plan_buckets: the gradient region cut into all-reduce buckets, last layers
// first (the CUDA backend's bucketed_all_reduce follows this plan).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <typeflow/distribute/bucket_plan.hpp>

namespace td = typeflow::distribute;

namespace {

std::vector<std::size_t> offsets_of(const std::vector<std::size_t>& sizes) {
  std::vector<std::size_t> offsets;
  std::size_t at = 0;
  for (const std::size_t s : sizes) {
    offsets.push_back(at);
    at += s;
  }
  return offsets;
}

std::size_t total_of(const std::vector<std::size_t>& sizes) {
  std::size_t t = 0;
  for (const std::size_t s : sizes) t += s;
  return t;
}

// Every property the plan promises, for one layout.
void check_plan(const std::vector<std::size_t>& sizes, std::size_t bucket_floats) {
  CAPTURE(sizes.size());
  CAPTURE(bucket_floats);
  const auto offsets = offsets_of(sizes);
  const std::size_t total = total_of(sizes);
  const auto buckets = td::plan_buckets(offsets, total, bucket_floats);
  REQUIRE(!buckets.empty());

  // Reverse layer order, contiguous: bucket 0 ends at the last layer, each
  // next bucket ends where the previous one starts, the last starts at layer 0.
  CHECK(buckets.front().end_layer == sizes.size());
  CHECK(buckets.back().first_layer == 0);
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    CAPTURE(b);
    CHECK(buckets[b].first_layer < buckets[b].end_layer);  // whole layers, at least one
    if (b + 1 < buckets.size()) CHECK(buckets[b + 1].end_layer == buckets[b].first_layer);
    // The float range is exactly that of its layers: no layer is split.
    const std::size_t begin = offsets[buckets[b].first_layer];
    const std::size_t end = buckets[b].end_layer < sizes.size() ? offsets[buckets[b].end_layer] : total;
    CHECK(buckets[b].offset == begin);
    CHECK(buckets[b].count == end - begin);
  }

  // Every float covered exactly once.
  std::vector<int> covered(total, 0);
  for (const auto& b : buckets)
    for (std::size_t i = b.offset; i < b.offset + b.count; ++i) ++covered[i];
  std::size_t once = 0;
  for (const int c : covered) once += c == 1;
  CHECK(once == total);

  // Sizes near the target: within it unless one layer alone exceeds it, and
  // full (the next layer would not have fit) unless it is the last bucket.
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    CAPTURE(b);
    if (buckets[b].count > bucket_floats) {
      // Only a single layer may be larger than a bucket (empty layers may ride along).
      std::size_t non_empty = 0;
      for (std::size_t l = buckets[b].first_layer; l < buckets[b].end_layer; ++l) non_empty += sizes[l] > 0;
      CHECK(non_empty == 1);
    }
    if (b + 1 < buckets.size()) {
      const std::size_t next_layer = buckets[b].first_layer - 1;
      CHECK(buckets[b].count + sizes[next_layer] > bucket_floats);
    }
  }

  // bucket_of_layers inverts the plan.
  const auto owner = td::bucket_of_layers(buckets);
  REQUIRE(owner.size() == sizes.size());
  for (std::size_t l = 0; l < sizes.size(); ++l) {
    const auto& b = buckets[owner[l]];
    CHECK((b.first_layer <= l && l < b.end_layer));
  }
}

}  // namespace

TEST_CASE("bucket plan: a small network, by hand") {
  // Layers of 4, 6, 3, 5 floats; buckets of 8: from the last layer, {5, 3} = 8
  // fits, 6 would overflow it; {6} alone (4 more would overflow); {4}.
  const std::vector<std::size_t> offsets{0, 4, 10, 13};
  const auto buckets = td::plan_buckets(offsets, 18, 8);
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0] == td::gradient_bucket{.first_layer = 2, .end_layer = 4, .offset = 10, .count = 8});
  CHECK(buckets[1] == td::gradient_bucket{.first_layer = 1, .end_layer = 2, .offset = 4, .count = 6});
  CHECK(buckets[2] == td::gradient_bucket{.first_layer = 0, .end_layer = 1, .offset = 0, .count = 4});
}

TEST_CASE("bucket plan: one bucket when everything fits, one layer per bucket when nothing pairs") {
  const std::vector<std::size_t> offsets{0, 100, 300};
  const auto all = td::plan_buckets(offsets, 600, 1'000'000);
  REQUIRE(all.size() == 1);
  CHECK(all[0] == td::gradient_bucket{.first_layer = 0, .end_layer = 3, .offset = 0, .count = 600});

  const auto each = td::plan_buckets(offsets, 600, 50);  // every layer exceeds a bucket on its own
  REQUIRE(each.size() == 3);
  CHECK(each[0] == td::gradient_bucket{.first_layer = 2, .end_layer = 3, .offset = 300, .count = 300});
  CHECK(each[1] == td::gradient_bucket{.first_layer = 1, .end_layer = 2, .offset = 100, .count = 200});
  CHECK(each[2] == td::gradient_bucket{.first_layer = 0, .end_layer = 1, .offset = 0, .count = 100});
}

TEST_CASE("bucket plan: layers without parameters join a bucket, and an empty region is one empty bucket") {
  // Sizes 0 (e.g. relu), 5, 0, 0, 7, 0: empty layers never open a bucket of their own.
  check_plan({0, 5, 0, 0, 7, 0}, 6);
  const auto buckets = td::plan_buckets(offsets_of({0, 5, 0, 0, 7, 0}), 12, 6);
  REQUIRE(buckets.size() == 2);
  CHECK(buckets[0] == td::gradient_bucket{.first_layer = 2, .end_layer = 6, .offset = 5, .count = 7});
  CHECK(buckets[1] == td::gradient_bucket{.first_layer = 0, .end_layer = 2, .offset = 0, .count = 5});

  const auto empty = td::plan_buckets(offsets_of({0, 0, 0}), 0, 10);
  REQUIRE(empty.size() == 1);
  CHECK(empty[0] == td::gradient_bucket{.first_layer = 0, .end_layer = 3, .offset = 0, .count = 0});
}

TEST_CASE("bucket plan: GPT-2-like layouts at 25 MiB cover every float once, in reverse layer order") {
  constexpr std::size_t bucket = td::default_bucket_bytes / sizeof(float);
  // Embedding (50257 x 768), then 12 blocks of (ln, attention, ln, mlp) tensors, then a final ln.
  std::vector<std::size_t> sizes{50257u * 768u, 1024u * 768u};
  for (int block = 0; block < 12; ++block)
    for (const std::size_t s : {768u * 2u, 768u * 2304u + 2304u, 768u * 768u + 768u, 768u * 2u,
                                768u * 3072u + 3072u, 3072u * 768u + 768u})
      sizes.push_back(s);
  sizes.push_back(768u * 2u);
  check_plan(sizes, bucket);
  const auto buckets = td::plan_buckets(offsets_of(sizes), total_of(sizes), bucket);
  CHECK(buckets.size() > 4);                 // 124 M floats in 6.5 M-float buckets
  CHECK(buckets.back().first_layer == 0);    // the embedding, 38.6 M floats, alone and last
  CHECK(buckets.back().end_layer == 1);
}

TEST_CASE("bucket plan: random layouts keep every promise") {
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::size_t> sizes(1 + next() % 40);
    for (auto& s : sizes) s = next() % 4 == 0 ? 0 : next() % (next() % 3 == 0 ? 5000 : 300);
    const std::size_t bucket_floats = 1 + next() % 2000;
    check_plan(sizes, bucket_floats);
  }
}

TEST_CASE("bucket plan: bad layouts are refused, naming the problem") {
  const std::vector<std::size_t> none;
  CHECK_THROWS_WITH_AS(td::plan_buckets(none, 0, 8), doctest::Contains("no layers"), std::invalid_argument);
  const std::vector<std::size_t> late{3, 5};
  CHECK_THROWS_WITH_AS(td::plan_buckets(late, 10, 8), doctest::Contains("start at float 0"), std::invalid_argument);
  const std::vector<std::size_t> backwards{0, 6, 4};
  CHECK_THROWS_WITH_AS(td::plan_buckets(backwards, 10, 8), doctest::Contains("layer 1 starts at float 6 but ends at 4"),
                       std::invalid_argument);
  const std::vector<std::size_t> past_end{0, 12};
  CHECK_THROWS_WITH_AS(td::plan_buckets(past_end, 10, 8),
                       doctest::Contains("layer 1 starts at float 12 but ends at 10"), std::invalid_argument);
  const std::vector<std::size_t> fine{0};
  CHECK_THROWS_WITH_AS(td::plan_buckets(fine, 10, 0), doctest::Contains("bucket_floats"), std::invalid_argument);
}

// typeflow::data combinators: filter, take, skip, repeat, zip, enumerate,
// interleave, shard, shuffle's and batch's options, parallel map, prefetch,
// cache; worker exceptions and prompt shutdown of threads.
//
// These tests also run under ThreadSanitizer: scripts/test.sh tsan.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include <typeflow/data/data.hpp>

#include "../support/test_support.hpp"

namespace data = typeflow::data;
using typeflow::shape;
using namespace std::chrono_literals;

namespace {

using typeflow::testing::collect;
using typeflow::testing::labels_of;
using typeflow::testing::contains;
using typeflow::testing::message_of;

struct temp_dir : typeflow::testing::temp_dir {
  temp_dir() : typeflow::testing::temp_dir("typeflow_data_pipeline_test") {}
};

using scalar_label = data::tensor_value<std::int32_t, shape<>>;
using counting_element = data::example<data::tensor_value<float, shape<1>>, scalar_label>;

// n samples of one float feature each, feature i = 10 * i, label i = i.
auto counting(int n) {
  std::vector<float> features(static_cast<std::size_t>(n));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    features[static_cast<std::size_t>(i)] = 10.f * static_cast<float>(i);
    labels[static_cast<std::size_t>(i)] = i;
  }
  return data::from_tensor_slices<shape<1>>(std::move(features), std::move(labels));
}

// A source of n examples that counts its next() calls that produced an element.
auto counted(int n, std::shared_ptr<std::atomic<int>> reads) {
  return data::generator<counting_element>(
      [n, reads, i = 0](counting_element& out) mutable {
        if (i == n) return false;
        out.features[0] = 10.f * static_cast<float>(i);
        out.label[0] = i++;
        reads->fetch_add(1);
        return true;
      },
      n);
}

// A source that sleeps `delay` before each of its n elements.
auto slow(int n, std::chrono::microseconds delay, std::shared_ptr<std::atomic<int>> calls = nullptr) {
  return data::generator<counting_element>(
      [n, delay, calls, i = 0](counting_element& out) mutable {
        if (calls) calls->fetch_add(1);
        if (i == n) return false;
        std::this_thread::sleep_for(delay);
        out.features[0] = static_cast<float>(i);
        out.label[0] = i++;
        return true;
      },
      n);
}




// A map function that takes some time, with a jitter that depends on the
// element, so that parallel workers finish out of order.
struct jittery_double {
  counting_element operator()(const counting_element& in) const {
    std::this_thread::sleep_for(std::chrono::microseconds((in.label[0] * 7919) % 5 * 300));
    counting_element out = in;
    out.features[0] = 2.f * in.features[0];
    return out;
  }
};

template <class Clock = std::chrono::steady_clock>
double seconds_since(typename Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

// ---- filter, take, skip, repeat ------------------------------------------------------------------

TEST_CASE("filter keeps the elements for which the predicate is true, in order, and its size is unknown") {
  auto even = counting(10) | data::filter([](const counting_element& e) { return e.label[0] % 2 == 0; });
  static_assert(std::is_same_v<decltype(even)::element_type, counting_element>);
  CHECK(even.cardinality() == data::unknown_cardinality);
  CHECK(labels_of(even) == std::vector<std::int32_t>{0, 2, 4, 6, 8});
  CHECK(collect(counting(5) | data::filter([](auto) { return false; })).empty());
}

TEST_CASE("take(n) ends after n elements, and of a shorter dataset yields all of it") {
  CHECK(labels_of(counting(10) | data::take(3)) == std::vector<std::int32_t>{0, 1, 2});
  CHECK((counting(10) | data::take(3)).cardinality() == 3);
  CHECK(labels_of(counting(2) | data::take(5)) == std::vector<std::int32_t>{0, 1});
  CHECK((counting(2) | data::take(5)).cardinality() == 2);
  CHECK(collect(counting(2) | data::take(0)).empty());
  CHECK(contains(message_of<std::invalid_argument>([] { data::take(-1); }), "n must be at least 0"));
}

TEST_CASE("skip(n) drops the first n elements") {
  CHECK(labels_of(counting(5) | data::skip(2)) == std::vector<std::int32_t>{2, 3, 4});
  CHECK((counting(5) | data::skip(2)).cardinality() == 3);
  CHECK(collect(counting(5) | data::skip(9)).empty());
  CHECK((counting(5) | data::skip(9)).cardinality() == 0);
  CHECK(labels_of(counting(5) | data::skip(1) | data::take(2)) == std::vector<std::int32_t>{1, 2});
}

TEST_CASE("repeat(n) yields the source n times, and a shuffle before it reshuffles every repetition") {
  auto twice = counting(3) | data::repeat(2);
  CHECK(twice.cardinality() == 6);
  CHECK(labels_of(twice) == std::vector<std::int32_t>{0, 1, 2, 0, 1, 2});
  CHECK(collect(counting(3) | data::repeat(0)).empty());

  auto shuffled = counting(20) | data::shuffle(20, 42) | data::repeat(3);
  const auto labels = labels_of(shuffled);
  REQUIRE(labels.size() == 60);
  // Repetition r of epoch 0 is the shuffle's epoch r.
  auto source = counting(20) | data::shuffle(20, 42);
  CHECK(std::vector<std::int32_t>(labels.begin(), labels.begin() + 20) == labels_of(source, 0));
  CHECK(std::vector<std::int32_t>(labels.begin() + 20, labels.begin() + 40) == labels_of(source, 1));
  CHECK(std::vector<std::int32_t>(labels.begin() + 40, labels.end()) == labels_of(source, 2));
  CHECK(contains(message_of<std::invalid_argument>([] { data::repeat(-1); }), "repeat() repeats forever"));
}

TEST_CASE("repeat() is infinite, take bounds it, and repeat() of an empty dataset is empty") {
  auto forever = counting(3) | data::repeat();
  CHECK(forever.cardinality() == data::infinite_cardinality);
  auto bounded = forever | data::take(7);
  CHECK(bounded.cardinality() == 7);
  CHECK(labels_of(bounded) == std::vector<std::int32_t>{0, 1, 2, 0, 1, 2, 0});
  CHECK((forever | data::batch<2>).cardinality() == data::infinite_cardinality);
  CHECK(collect(counting(0) | data::repeat()).empty());
  CHECK((counting(0) | data::repeat()).cardinality() == 0);
}

// ---- zip, enumerate ---------------------------------------------------------------------------------

TEST_CASE("zip pairs elements position by position and ends with the shortest dataset") {
  auto zipped = data::zip(data::range(10, 15), counting(3));
  static_assert(std::is_same_v<decltype(zipped)::element_type, std::tuple<std::int64_t, counting_element>>);
  CHECK(zipped.cardinality() == 3);
  const auto elements = collect(zipped);
  REQUIRE(elements.size() == 3);
  CHECK(std::get<0>(elements[2]) == 12);
  CHECK(std::get<1>(elements[2]).label[0] == 2);

  // Features and labels from two datasets, made into examples with map.
  auto features = data::range(5) | data::map([](std::int64_t i) {
                    data::tensor_value<float, shape<2>> f;
                    f[0] = f[1] = static_cast<float>(i);
                    return f;
                  });
  auto labels = data::range(5) | data::map([](std::int64_t i) { return scalar_label{{static_cast<std::int32_t>(i % 2)}}; });
  auto examples = data::zip(features, labels) | data::map([](const auto& pair) {
                    return data::example<data::tensor_value<float, shape<2>>, scalar_label>{std::get<0>(pair), std::get<1>(pair)};
                  }) |
                  data::batch<5>;
  const auto batches = collect(examples);
  REQUIRE(batches.size() == 1);
  CHECK(batches[0].labels == std::vector<std::int32_t>{0, 1, 0, 1, 0});
  CHECK(batches[0].features[9] == 4.f);

  CHECK(data::zip(data::range(3) | data::repeat(), data::range(5) | data::repeat()).cardinality() ==
        data::infinite_cardinality);
  CHECK(data::zip(data::range(3) | data::repeat(), data::range(5)).cardinality() == 5);
}

TEST_CASE("enumerate pairs each element with its index, from start, again each epoch") {
  auto numbered = counting(3) | data::enumerate(100);
  static_assert(std::is_same_v<decltype(numbered)::element_type, data::enumerated<counting_element>>);
  for (std::uint64_t epoch : {0u, 1u}) {
    const auto elements = collect(numbered, epoch);
    REQUIRE(elements.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
      const auto& [index, element] = elements[i];
      CHECK(index == static_cast<std::int64_t>(100 + i));
      CHECK(element.label[0] == static_cast<std::int32_t>(i));
    }
  }
}

// ---- interleave -------------------------------------------------------------------------------------

TEST_CASE("interleave takes block_length elements from each of cycle_length datasets in turn, in tf.data's order") {
  // tf.data's documented example: Dataset.range(1, 6).interleave(
  //   lambda x: Dataset.from_tensors(x).repeat(6), cycle_length=2, block_length=4)
  auto interleaved = data::range(1, 6) | data::interleave(
                                             [](std::int64_t x) { return data::range(x, x + 1) | data::repeat(6); },
                                             /*cycle_length=*/2, /*block_length=*/4);
  static_assert(std::is_same_v<decltype(interleaved)::element_type, std::int64_t>);
  CHECK(interleaved.cardinality() == data::unknown_cardinality);
  CHECK(collect(interleaved) == std::vector<std::int64_t>{1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3,
                                                          3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5});
}

TEST_CASE("interleave over several files reads them in turn, each file once") {
  temp_dir dir;
  std::vector<std::filesystem::path> paths;
  for (const std::string text : {"aaaa", "bb", "cccccc"}) {
    paths.push_back(dir.path / (text.substr(0, 1) + ".txt"));
    std::ofstream(paths.back(), std::ios::binary) << text;
  }
  auto bytes = data::from_values(paths) |
               data::interleave([](const std::filesystem::path& p) { return data::text_file(p); }, 2, 2);
  const auto tokens = collect(bytes);
  const std::string text(tokens.begin(), tokens.end());
  CHECK(text == "aabbaacccccc");
  CHECK(contains(message_of<std::invalid_argument>([] { data::interleave([](int) { return data::range(1); }, 0); }),
                 "cycle_length must be at least 1"));
}

// ---- shard ----------------------------------------------------------------------------------------------

TEST_CASE("shard(n, i) yields every n-th element from element i, and the n shards partition the data") {
  CHECK(labels_of(counting(10) | data::shard(3, 0)) == std::vector<std::int32_t>{0, 3, 6, 9});
  CHECK(labels_of(counting(10) | data::shard(3, 1)) == std::vector<std::int32_t>{1, 4, 7});
  CHECK(labels_of(counting(10) | data::shard(3, 2)) == std::vector<std::int32_t>{2, 5, 8});
  CHECK((counting(10) | data::shard(3, 0)).cardinality() == 4);
  CHECK((counting(10) | data::shard(3, 2)).cardinality() == 3);
  CHECK((counting(2) | data::shard(3, 2)).cardinality() == 0);
  CHECK(collect(counting(2) | data::shard(3, 2)).empty());
  CHECK(labels_of(counting(4) | data::shard(1, 0)) == std::vector<std::int32_t>{0, 1, 2, 3});

  std::multiset<std::int32_t> all;
  for (int worker = 0; worker < 4; ++worker)
    for (std::int32_t label : labels_of(counting(37) | data::shard(4, worker) | data::shuffle(16, 5))) all.insert(label);
  const auto whole = labels_of(counting(37));
  CHECK(all == std::multiset<std::int32_t>(whole.begin(), whole.end()));
}

TEST_CASE("shard refuses a shard count below 1, and an index that is negative or not below the shard count") {
  CHECK(contains(message_of<std::invalid_argument>([] { data::shard(0, 0); }), "num_shards must be at least 1"));
  CHECK(contains(message_of<std::invalid_argument>([] { data::shard(3, 3); }), "index must be in [0, num_shards)"));
  CHECK(contains(message_of<std::invalid_argument>([] { data::shard(3, -1); }), "got -1"));
}

// ---- shuffle and batch options ------------------------------------------------------------------------

TEST_CASE("shuffle with reshuffle_each_iteration false gives epoch 0's order in every epoch") {
  auto fixed = counting(50) | data::shuffle(50, 42, /*reshuffle_each_iteration=*/false);
  const auto first = labels_of(fixed, 0);
  CHECK(first == labels_of(counting(50) | data::shuffle(50, 42), 0));
  CHECK(first != labels_of(counting(50)));
  for (std::uint64_t epoch = 1; epoch < 4; ++epoch) CHECK(labels_of(fixed, epoch) == first);
}

TEST_CASE("shuffle over a random-access source gives the same order as over the same elements read in sequence") {
  const auto always = data::filter([](const counting_element&) { return true; });  // hides random access
  static_assert(data::random_access_dataset<decltype(counting(1))>);
  static_assert(data::random_access_dataset<decltype(counting(1) | data::map(jittery_double{}))>);
  static_assert(!data::random_access_dataset<decltype(counting(1) | always)>);
  static_assert(data::random_access_dataset<data::mnist>);
  for (std::size_t buffer : {1u, 5u, 64u, 200u, 1000u})
    for (std::uint64_t epoch : {0u, 3u}) {
      CAPTURE(buffer);
      CAPTURE(epoch);
      CHECK(labels_of(counting(200) | data::shuffle(buffer, 42), epoch) ==
            labels_of(counting(200) | always | data::shuffle(buffer, 42), epoch));
    }
  // A parallel map is read in sequence (its workers stream the source); the order is the same.
  const auto halve = [](counting_element e) {
    e.features[0] /= 2;
    return e;
  };
  const auto sequential = collect(counting(100) | data::map(halve) | data::shuffle(30, 8));
  const auto parallel = collect(counting(100) | data::map(halve, 2) | data::shuffle(30, 8));
  REQUIRE(sequential.size() == parallel.size());
  for (std::size_t i = 0; i < sequential.size(); ++i) {
    CHECK(sequential[i].label[0] == parallel[i].label[0]);
    CHECK(sequential[i].features[0] == 5.f * static_cast<float>(sequential[i].label[0]));
  }
}

TEST_CASE("shuffle over a random-access map reads an element, and calls f, only as it leaves the buffer") {
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto shuffled = counting(1000) | data::map([calls](counting_element e) {
                    calls->fetch_add(1);
                    return e;
                  }) |
                  data::shuffle(1000, 1);
  auto cursor = shuffled.open(0);
  counting_element element{};
  REQUIRE(cursor.next(element));
  CHECK(calls->load() == 1);  // not 1000 before the first element
  int n = 1;
  while (cursor.next(element)) ++n;
  CHECK(n == 1000);
  CHECK(calls->load() == 1000);
}

TEST_CASE("batch<N, remainder::drop> drops the last partial batch, and its cardinality counts full batches") {
  auto dropped = counting(10) | data::batch<4, data::remainder::drop>;
  static_assert(std::is_same_v<decltype(dropped)::element_type, decltype(counting(10) | data::batch<4>)::element_type>);
  CHECK(dropped.cardinality() == 2);
  CHECK(dropped.full_batches() == 2);
  const auto batches = collect(dropped);
  REQUIRE(batches.size() == 2);
  CHECK(batches[1].valid == 4);
  CHECK(batches[1].labels == std::vector<std::int32_t>{4, 5, 6, 7});
  CHECK(collect(counting(3) | data::batch<4, data::remainder::drop>).empty());
}

TEST_CASE("a padded last batch's mask marks its padding rows") {
  const auto batches = collect(counting(6) | data::batch<4>);
  REQUIRE(batches.size() == 2);
  CHECK(batches[1].valid == 2);
  CHECK_FALSE(batches[1].is_padding(1));
  CHECK(batches[1].is_padding(2));
  CHECK(batches[1].is_padding(3));
  CHECK_FALSE(batches[0].is_padding(3));
}

// ---- map with num_parallel_calls ----------------------------------------------------------------------

TEST_CASE("map with num_parallel_calls gives the same elements in the same order as a sequential map") {
  const auto expected = collect(counting(200) | data::map(jittery_double{}));
  for (int workers : {1, 2, 3, 8, data::autotune}) {
    CAPTURE(workers);
    auto parallel = counting(200) | data::map(jittery_double{}, workers);
    static_assert(std::is_same_v<decltype(parallel)::element_type, counting_element>);
    CHECK(parallel.cardinality() == 200);
    const auto elements = collect(parallel);
    REQUIRE(elements.size() == expected.size());
    bool same = true;
    for (std::size_t i = 0; i < elements.size(); ++i)
      same = same && elements[i].label[0] == expected[i].label[0] && elements[i].features[0] == expected[i].features[0];
    CHECK(same);
  }
}

TEST_CASE("map with num_parallel_calls runs the function on several threads at once") {
  std::atomic<int> running{0}, most{0};
  std::mutex ids_mutex;
  std::set<std::thread::id> ids;
  auto parallel = counting(24) | data::map(
                                     [&](const counting_element& in) {
                                       const int now = running.fetch_add(1) + 1;
                                       for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
                                       }
                                       {
                                         std::lock_guard lock(ids_mutex);
                                         ids.insert(std::this_thread::get_id());
                                       }
                                       std::this_thread::sleep_for(2ms);
                                       running.fetch_sub(1);
                                       return in;
                                     },
                                     3);
  CHECK(labels_of(parallel).size() == 24);
  CHECK(most.load() >= 2);
  CHECK(ids.size() >= 2);
  CHECK_FALSE(ids.contains(std::this_thread::get_id()));
}

TEST_CASE("an exception thrown by f in a map worker reaches the consumer with its message, after the elements before it") {
  auto failing = counting(50) | data::map(
                                    [](const counting_element& in) {
                                      if (in.label[0] == 17) throw std::domain_error("bad sample 17 in f");
                                      return in;
                                    },
                                    4);
  auto cursor = failing.open(0);
  counting_element element{};
  for (int i = 0; i < 17; ++i) {
    REQUIRE(cursor.next(element));
    CHECK(element.label[0] == i);
  }
  CHECK_THROWS_WITH_AS(cursor.next(element), "bad sample 17 in f", std::domain_error);
  CHECK_FALSE(cursor.next(element));  // the pass is over
}

TEST_CASE("an exception thrown by the source under a parallel map reaches the consumer in its place") {
  auto source = data::generator<counting_element>([i = 0](counting_element& out) mutable {
    if (i == 5) throw std::runtime_error("source broke at element 5");
    out.label[0] = i++;
    return true;
  });
  auto cursor = (source | data::map([](counting_element e) { return e; }, 2)).open(0);
  counting_element element{};
  for (int i = 0; i < 5; ++i) REQUIRE(cursor.next(element));
  CHECK_THROWS_WITH_AS(cursor.next(element), "source broke at element 5", std::runtime_error);
}

TEST_CASE("map refuses num_parallel_calls below 1 other than autotune") {
  CHECK(contains(message_of<std::invalid_argument>([] { data::map([](int x) { return x; }, 0); }),
                 "num_parallel_calls must be at least 1, or autotune"));
}

// ---- prefetch -----------------------------------------------------------------------------------------

TEST_CASE("prefetch yields the source's elements in order, and passes cardinality and full_batches through") {
  auto prefetched = counting(100) | data::prefetch(3);
  static_assert(std::is_same_v<decltype(prefetched)::element_type, counting_element>);
  CHECK(prefetched.cardinality() == 100);
  CHECK(labels_of(prefetched) == labels_of(counting(100)));
  CHECK(labels_of(counting(100) | data::prefetch(data::autotune)) == labels_of(counting(100)));
  CHECK((counting(10) | data::batch<4> | data::prefetch(2)).full_batches() == 2);
  CHECK(collect(counting(0) | data::prefetch(1)).empty());
  CHECK(contains(message_of<std::invalid_argument>([] { data::prefetch(0); }), "buffer_size must be at least 1"));
}

TEST_CASE("prefetch runs the source ahead of the consumer on another thread, at most k elements ahead") {
  std::atomic<bool> on_other_thread{false};
  const auto consumer = std::this_thread::get_id();
  auto pipeline = counting(8) | data::map([&](counting_element e) {
                    if (std::this_thread::get_id() != consumer) on_other_thread = true;
                    return e;
                  }) |
                  data::prefetch(4);
  CHECK(labels_of(pipeline).size() == 8);
  CHECK(on_other_thread.load());

  const auto wait_for_reads = [](const std::atomic<int>& reads, int n) {
    for (int waited = 0; reads.load() < n && waited < 2000; ++waited) std::this_thread::sleep_for(1ms);
  };
  auto reads = std::make_shared<std::atomic<int>>(0);
  auto cursor = (counted(100, reads) | data::prefetch(4)).open(0);
  wait_for_reads(*reads, 4);
  std::this_thread::sleep_for(30ms);
  CHECK(reads->load() == 4);  // the ring is full: the queue is bounded
  counting_element element{};
  REQUIRE(cursor.next(element));
  CHECK(element.label[0] == 0);
  wait_for_reads(*reads, 5);
  CHECK(reads->load() == 5);  // one slot freed, one more element read ahead
}

TEST_CASE("prefetch hands batches over by swapping storage, so the consumer's batches are refilled in place") {
  auto pipeline = counting(64) | data::batch<4> | data::prefetch(2);
  decltype(pipeline)::element_type batch;
  std::set<const float*> buffers;
  std::vector<std::int32_t> labels;
  for (auto cursor = pipeline.open(0); cursor.next(batch);) {
    buffers.insert(batch.features.data());
    labels.insert(labels.end(), batch.labels.begin(), batch.labels.end());
  }
  CHECK(labels == labels_of(counting(64)));
  CHECK(buffers.size() <= 3);  // the 2 slots' storage and the consumer's own, going round
}

TEST_CASE("an exception thrown in prefetch's thread reaches the consumer with its message, after the elements before it") {
  auto source = data::generator<counting_element>([i = 0](counting_element& out) mutable {
    if (i == 3) throw std::out_of_range("reader failed after 3 elements");
    out.label[0] = i++;
    return true;
  });
  auto cursor = (source | data::prefetch(2)).open(0);
  counting_element element{};
  for (int i = 0; i < 3; ++i) {
    REQUIRE(cursor.next(element));
    CHECK(element.label[0] == i);
  }
  CHECK_THROWS_WITH_AS(cursor.next(element), "reader failed after 3 elements", std::out_of_range);
  CHECK_FALSE(cursor.next(element));
}

TEST_CASE("an exception from a parallel map inside prefetch reaches the consumer through both threads") {
  auto pipeline = counting(40) | data::map(
                                     [](const counting_element& in) {
                                       if (in.label[0] == 21) throw std::invalid_argument("f refused 21");
                                       return in;
                                     },
                                     2) |
                  data::batch<4> | data::prefetch(2);
  auto cursor = pipeline.open(0);
  decltype(pipeline)::element_type batch;
  for (int i = 0; i < 5; ++i) REQUIRE(cursor.next(batch));  // samples 0..19
  CHECK_THROWS_WITH_AS(cursor.next(batch), "f refused 21", std::invalid_argument);
}

// ---- shutdown: destroying a pipeline mid-epoch ----------------------------------------------------------

TEST_CASE("destroying a pipeline mid-epoch joins every thread promptly, and no thread reads on afterwards") {
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto pipeline = slow(1000, 20ms, calls) | data::map([](counting_element e) { return e; }, 2) | data::batch<2> |
                  data::prefetch(4);
  std::chrono::steady_clock::time_point start;
  {
    auto cursor = pipeline.open(0);
    decltype(pipeline)::element_type batch;
    REQUIRE(cursor.next(batch));
    CHECK(batch.labels == std::vector<std::int32_t>{0, 1});
    start = std::chrono::steady_clock::now();
  }  // prefetch's producer is blocked in batch -> map, whose workers sleep in the generator
  const double destroy_seconds = seconds_since(start);
  CAPTURE(destroy_seconds);
  CHECK(destroy_seconds < 0.5);  // one 20 ms generator call at most, not the 1000 elements
  const int calls_after_destroy = calls->load();
  std::this_thread::sleep_for(60ms);
  CHECK(calls->load() == calls_after_destroy);
}

TEST_CASE("destroying a cursor right after open, before any next(), joins promptly") {
  auto pipeline = slow(1000, 10ms) | data::map([](counting_element e) { return e; }, 4) | data::prefetch(8);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    auto cursor = pipeline.open(static_cast<std::uint64_t>(i));
  }
  CHECK(seconds_since(start) < 1.0);
}

TEST_CASE("a cursor with threads can be moved, as any_dataset and fit do") {
  data::any_dataset<counting_element> any = counting(30) | data::map([](counting_element e) { return e; }, 2) |
                                            data::prefetch(2);
  CHECK(any.cardinality() == 30);
  auto cursor = any.open(0);
  auto moved = std::move(cursor);
  counting_element element{};
  int n = 0;
  while (moved.next(element)) CHECK(element.label[0] == n++);
  CHECK(n == 30);
}

// ---- cache() in memory ---------------------------------------------------------------------------------

TEST_CASE("cache() serves the passes after the first complete one from memory, without reading the source") {
  auto reads = std::make_shared<std::atomic<int>>(0);
  auto cached = counted(10, reads) | data::cache();
  CHECK(cached.cardinality() == 10);
  CHECK_FALSE(cached.cached());
  CHECK(labels_of(cached, 0) == labels_of(counting(10)));
  CHECK(reads->load() == 10);
  CHECK(cached.cached());
  const auto copy = cached;  // copies share the cache
  CHECK(labels_of(copy, 1) == labels_of(counting(10)));
  CHECK(labels_of(cached | data::shuffle(10, 1), 2).size() == 10);
  CHECK(reads->load() == 10);
}

TEST_CASE("cache() keeps no partial pass: after an interrupted first epoch the next one reads the source") {
  auto reads = std::make_shared<std::atomic<int>>(0);
  auto cached = counted(10, reads) | data::cache();
  {
    auto cursor = cached.open(0);
    counting_element element{};
    for (int i = 0; i < 4; ++i) REQUIRE(cursor.next(element));
  }
  CHECK_FALSE(cached.cached());
  const int before = reads->load();
  CHECK(labels_of(cached, 1) == labels_of(counting(10)));
  CHECK(reads->load() == before + 10);
  CHECK(cached.cached());
}

TEST_CASE("cache() completes a pass whose consumer stops right after the last element, as fit does") {
  auto reads = std::make_shared<std::atomic<int>>(0);
  auto cached = counted(10, reads) | data::batch<4> | data::cache();
  CHECK(cached.full_batches() == 2);
  {
    auto cursor = cached.open(0);
    decltype(cached)::element_type batch;
    for (int i = 0; i < 3; ++i) REQUIRE(cursor.next(batch));
    CHECK(batch.valid == 2);  // the last, partial batch; no further next()
  }
  CHECK(cached.cached());
  const auto replay = collect(cached, 1);
  REQUIRE(replay.size() == 3);
  CHECK(replay[2].valid == 2);
  CHECK(replay[2].labels == std::vector<std::int32_t>{8, 9, 0, 0});
  CHECK(reads->load() == 10);
}

TEST_CASE("cache() replays batches into the consumer's own storage") {
  auto cached = counting(16) | data::batch<4> | data::cache();
  (void)collect(cached);
  decltype(cached)::element_type batch;
  const float* storage = batch.features.data();
  int batches = 0;
  for (auto cursor = cached.open(1); cursor.next(batch); ++batches) CHECK(batch.features.data() == storage);
  CHECK(batches == 4);
}

// ---- cache(path) on disk ----------------------------------------------------------------------------------

TEST_CASE("cache(path) writes its file only when the first pass completes, and later passes read it") {
  temp_dir dir;
  const auto path = dir.path / "train.cache";
  auto reads = std::make_shared<std::atomic<int>>(0);
  auto cached = counted(10, reads) | data::cache(path);
  CHECK(cached.cardinality() == 10);
  {
    auto cursor = cached.open(0);
    counting_element element{};
    for (int i = 0; i < 5; ++i) REQUIRE(cursor.next(element));
    CHECK_FALSE(std::filesystem::exists(path));
    CHECK(dir.files().size() == 1);  // the temporary file, beside path
    CHECK(contains(dir.files()[0], "train.cache.tmp-"));
    for (int i = 5; i < 10; ++i) REQUIRE(cursor.next(element));
    CHECK(std::filesystem::exists(path));  // complete as the last element is handed out
  }
  CHECK(dir.files() == std::vector<std::string>{"train.cache"});
  CHECK(std::filesystem::file_size(path) == 32 + 10 * sizeof(counting_element));

  CHECK(labels_of(cached, 1) == labels_of(counting(10)));
  // A new pipeline over the same path (a later run of the program) reads the file, not its source.
  auto later_reads = std::make_shared<std::atomic<int>>(0);
  const auto replay = collect(counted(10, later_reads) | data::cache(path), 0);
  REQUIRE(replay.size() == 10);
  CHECK(replay[7].features[0] == 70.f);
  CHECK(replay[7].label[0] == 7);
  CHECK(reads->load() == 10);
  CHECK(later_reads->load() == 0);
}

TEST_CASE("cache(path): an interrupted first epoch leaves no file, and a later run recomputes from the source") {
  temp_dir dir;
  const auto path = dir.path / "partial.cache";
  auto reads = std::make_shared<std::atomic<int>>(0);
  {
    auto cursor = (counted(100, reads) | data::cache(path)).open(0);
    counting_element element{};
    for (int i = 0; i < 30; ++i) REQUIRE(cursor.next(element));
  }  // destroyed mid-epoch
  CHECK(dir.files().empty());  // neither path nor the temporary file

  auto later_reads = std::make_shared<std::atomic<int>>(0);
  auto later = counted(100, later_reads) | data::cache(path);
  CHECK(labels_of(later, 0).size() == 100);
  CHECK(later_reads->load() == 100);
  CHECK(std::filesystem::exists(path));
  CHECK(labels_of(later, 1).size() == 100);
  CHECK(later_reads->load() == 100);
}

TEST_CASE("cache(path): a source that throws mid-pass leaves no file") {
  temp_dir dir;
  auto source = data::generator<counting_element>([i = 0](counting_element& out) mutable {
    if (i == 6) throw std::runtime_error("disk read failed");
    out.label[0] = i++;
    return true;
  });
  auto cursor = (source | data::cache(dir.path / "x.cache")).open(0);
  counting_element element{};
  for (int i = 0; i < 6; ++i) REQUIRE(cursor.next(element));  // the 6th is delivered before the error
  CHECK_THROWS_WITH_AS(cursor.next(element), "disk read failed", std::runtime_error);
  CHECK_FALSE(cursor.next(element));
  CHECK_FALSE(std::filesystem::exists(dir.path / "x.cache"));
}

TEST_CASE("cache(path) of batches round-trips features, labels and valid") {
  temp_dir dir;
  auto cached = counting(10) | data::batch<4> | data::cache(dir.path / "batches.cache");
  const auto first = collect(cached, 0);
  const auto replay = collect(cached, 1);
  REQUIRE(replay.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(replay[i].features == first[i].features);
    CHECK(replay[i].labels == first[i].labels);
    CHECK(replay[i].valid == first[i].valid);
  }
  CHECK(replay[2].valid == 2);
}

TEST_CASE("cache(path) of weighted batches round-trips the sample weights, and unbatch refuses them") {
  temp_dir dir;
  std::vector<float> features(10), weights;
  std::vector<std::int32_t> labels(10);
  for (int i = 0; i < 10; ++i) {
    features[static_cast<std::size_t>(i)] = static_cast<float>(i);
    weights.push_back(0.5f * static_cast<float>(i));
  }
  auto weighted = data::from_tensor_slices<shape<1>>(features, labels, weights) | data::batch<4>;
  auto cached = weighted | data::cache(dir.path / "weighted.cache");
  const auto first = collect(cached, 0);
  const auto replay = collect(cached, 1);
  REQUIRE(replay.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(replay[i].sample_weights == first[i].sample_weights);
  CHECK(replay[2].sample_weights == std::vector<float>{4.f, 4.5f, 0.f, 0.f});
  // Unweighted batches stay unweighted through a cache file.
  auto plain = data::from_tensor_slices<shape<1>>(features, labels) | data::batch<4> | data::cache(dir.path / "plain.cache");
  (void)collect(plain, 0);
  for (const auto& b : collect(plain, 1)) CHECK(b.sample_weights.empty());
  CHECK_THROWS_WITH_AS(collect(weighted | data::unbatch, 0), doctest::Contains("unbatch: these batches carry sample weights"),
                       std::invalid_argument);
}

TEST_CASE("a truncated cache file is an error naming the file and the offset where its data ends") {
  temp_dir dir;
  const auto path = dir.path / "cut.cache";
  (void)collect(counting(10) | data::cache(path));
  const auto full = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, full - 5);
  const std::string message = message_of<std::runtime_error>([&] { collect(counting(10) | data::cache(path)); });
  CHECK(contains(message, "cache file " + path.string()));
  CHECK(contains(message, "is truncated"));
  CHECK(contains(message, "the data ends at byte offset " + std::to_string(full - 5)));
  CHECK(contains(message, "in record 9"));

  std::filesystem::resize_file(path, 20);
  CHECK(contains(message_of<std::runtime_error>([&] { collect(counting(10) | data::cache(path)); }),
                 "is truncated inside its header"));
}

TEST_CASE("a cache file of another element type, or not a cache file, is refused with the offset") {
  temp_dir dir;
  const auto path = dir.path / "other.cache";
  (void)collect(counting(10) | data::cache(path));
  auto other = data::lm_windows<4>(std::vector<std::int32_t>(20, 1)) | data::cache(path);
  const std::string message = message_of<std::runtime_error>([&] { collect(other); });
  CHECK(contains(message, "was written for another element type"));
  CHECK(contains(message, "byte offset 8"));
  CHECK(contains(message, "delete it"));

  std::ofstream(path, std::ios::binary | std::ios::trunc) << "not a cache at all, no";
  CHECK(contains(message_of<std::runtime_error>([&] { collect(counting(10) | data::cache(path)); }),
                 "is not a typeflow cache file: bad magic at byte offset 0"));
}

TEST_CASE("cache(path) in a directory that does not exist is an error naming the path") {
  temp_dir dir;
  const auto path = dir.path / "missing" / "c.cache";
  const std::string message = message_of<std::runtime_error>([&] { collect(counting(3) | data::cache(path)); });
  CHECK(contains(message, path.string()));
  CHECK(contains(message, "cannot be written"));
}

// ---- the whole pipeline --------------------------------------------------------------------------------------

TEST_CASE("source | map(f, 2) | cache | shuffle | batch | prefetch yields every sample once per epoch, deterministically") {
  auto pipeline = counting(103) | data::map(jittery_double{}, 2) | data::cache() | data::shuffle(64, 9) |
                  data::batch<8> | data::prefetch(2);
  using batch_type = decltype(pipeline)::element_type;
  static_assert(std::is_same_v<batch_type, data::batch_of<8, data::tensor_value<float, shape<1>>, scalar_label>>);
  CHECK(pipeline.cardinality() == 13);
  CHECK(pipeline.full_batches() == 12);

  const auto epoch_labels = [&](std::uint64_t epoch) {
    std::vector<std::int32_t> labels;
    batch_type batch;
    for (auto cursor = pipeline.open(epoch); cursor.next(batch);)
      for (int row = 0; row < batch.valid; ++row) {
        labels.push_back(batch.labels[static_cast<std::size_t>(row)]);
        CHECK(batch.features[static_cast<std::size_t>(row)] == 20.f * static_cast<float>(labels.back()));
      }
    return labels;
  };
  const auto first = epoch_labels(0);
  const auto second = epoch_labels(1);
  CHECK(first.size() == 103);
  CHECK(first != second);
  auto sorted = second;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == labels_of(counting(103)));
  CHECK(epoch_labels(1) == second);  // from the cache now, the same order for the same epoch
}

// A training step allocates nothing: proven by counting every operator new
// between the first and the last step of an epoch (the pipeline's next(), the
// step itself and the callbacks between steps all run in that window).
//
// oneDNN 2.6's execute() builds a std::unordered_map of its arguments on each
// call; typeflow marks those calls (core/foreign_calls.hpp), so the test
// asserts that typeflow's own count is zero and reports oneDNN's separately.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace {
std::atomic<bool> counting{false};
std::atomic<long> own_allocations{0};
std::atomic<long> foreign_allocations{0};

void* counted_allocation(std::size_t size, std::size_t alignment = 0) {
  if (counting.load(std::memory_order_relaxed)) {
    if (typeflow::detail::foreign_call_depth > 0)
      foreign_allocations.fetch_add(1, std::memory_order_relaxed);
    else
      own_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  if (size == 0) size = 1;
  void* p = alignment ? std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment)
                      : std::malloc(size);
  return p;
}
}  // namespace

// Every replaced operator new below allocates with malloc, so free is the
// matching release; g++ cannot see that the pairs were replaced together.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(std::size_t size) {
  if (void* p = counted_allocation(size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) {
  if (void* p = counted_allocation(size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return counted_allocation(size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return counted_allocation(size); }
void* operator new(std::size_t size, std::align_val_t a) {
  if (void* p = counted_allocation(size, static_cast<std::size_t>(a))) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size, std::align_val_t a) {
  if (void* p = counted_allocation(size, static_cast<std::size_t>(a))) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace tf = typeflow;

namespace {
// Counts from the end of an epoch's first step to the epoch's end.
struct counting_window : tf::callback {
  long steps = 0;
  void on_batch_end(std::int64_t step, const tf::logs&) override {
    if (step == 1) counting = true;
    steps += step > 1;
  }
  void on_epoch_end(const tf::epoch_info&, const tf::logs&) override { counting = false; }
};
}  // namespace

TEST_CASE("fit's training steps allocate no heap memory") {
  using net = tf::sequential<tf::input<8, 8>, tf::flatten, tf::dense<64>, tf::relu, tf::dropout<0.25f>,
                             tf::dense<32>, tf::gelu, tf::dense<10>, tf::softmax>;
  std::vector<float> features(512 * 64);
  std::vector<std::int32_t> labels(512);
  for (std::size_t i = 0; i < features.size(); ++i) features[i] = static_cast<float>(i % 17) / 17.f;
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i % 10);
  auto data = tf::data::from_tensor_slices<tf::shape<8, 8>>(features, labels) |
              tf::data::map([](auto example) {
                for (auto& v : example.features.values) v = v * 2.f - 1.f;
                return example;
              }) |
              tf::data::shuffle(256, 1) | tf::data::batch<32> | tf::data::prefetch(2);

  tf::model<net> model{1};
  model.compile(tf::optimizers::adam{}, tf::losses::sparse_categorical_crossentropy{},
                tf::metrics::accuracy{});
  counting_window window;
  // verbose = 1 with output to a pipe or file still runs the progress bar.
  model.fit(data, {.epochs = 2, .callbacks = {&window}, .verbose = 1});

  MESSAGE("steps counted: " << window.steps << ", typeflow allocations: " << own_allocations.load()
                            << ", oneDNN execute() allocations: " << foreign_allocations.load());
  CHECK(window.steps == 2 * (512 / 32 - 1));
  CHECK(own_allocations.load() == 0);
}

TEST_CASE("the counter sees allocations when they happen") {
  counting = true;
  auto* p = new std::vector<int>(100);
  counting = false;
  delete p;
  CHECK(own_allocations.load() >= 2);
}

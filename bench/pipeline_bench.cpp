// The input pipeline's throughput, and how long the training step waits for it.
//
//   build/bench/pipeline_bench [--benchmark_filter=BM_mnist_map_50us]
//
// Reads MNIST from $TYPEFLOW_DATA_DIR/mnist, else data/mnist (run from the
// repository root). Every figure is wall-clock time (UseRealTime): the work
// happens on the pipeline's threads as much as on the benchmark's.
//
// BM_mnist_map_50us/parallel:P    mnist | map(f, P) | take(2000), where f costs
//                                 about 50 us per element (it spins on the clock,
//                                 then scales the pixels). P = 0 runs f inline in
//                                 next(); P = 1, 2 on that many worker threads.
//                                 items_per_second = elements/s.
// BM_step_loop/prefetch:K         mnist | map(f_5us) | batch<128> [| prefetch(K)],
//                                 read by a loop whose "step" spins 1 ms per batch:
//                                 the same loop with and without prefetch.
//                                 items_per_second = batches/s; input_wait_fraction
//                                 = the time next() took / the loop's time.
// BM_mnist_mlp_fit/prefetch:K/map_us:M   one epoch of fit (100 steps of batch 128)
//                                 of examples/mnist_mlp.cpp's network, pipeline
//                                 mnist | map(scale, + M us of spinning) | shuffle |
//                                 batch<128> | take(100) [| prefetch(K)].
//                                 input_wait_fraction from History (what fit
//                                 logs), ms_per_step, and pipeline_ms_per_batch:
//                                 the same pipeline read alone, before the fit.
//                                 The goal: with prefetch, when the pipeline
//                                 alone is faster than the step, the step waits
//                                 for data less than 5% of the time.
//
// On a machine with few cores the pipeline's threads share the cores with
// the step's OpenMP team; they run under SCHED_BATCH so that waking them does
// not preempt the step (data/background_thread.hpp). Compare a run with
// OMP_WAIT_POLICY=passive, where libgomp's idle threads sleep instead of
// spinning, to see how much the spinning costs.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <benchmark/benchmark.h>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;
using clock_type = std::chrono::steady_clock;

namespace {

std::filesystem::path mnist_dir() {
  const char* root = std::getenv("TYPEFLOW_DATA_DIR");
  return root ? std::filesystem::path(root) / "mnist" : std::filesystem::path("data/mnist");
}

// The training split, loaded once for every benchmark; null (and the reason) if it cannot be.
const tf::data::mnist* mnist_train(std::string& error) {
  static std::unique_ptr<tf::data::mnist> train;
  static std::string load_error;
  static bool tried = false;
  if (!tried) {
    tried = true;
    try {
      train = std::make_unique<tf::data::mnist>(mnist_dir(), tf::data::split::train);
    } catch (const std::exception& e) {
      load_error = std::string(e.what()) + " (run scripts/setup.sh, or set TYPEFLOW_DATA_DIR)";
    }
  }
  error = load_error;
  return train.get();
}

void spin_for(std::chrono::nanoseconds duration) {
  const auto until = clock_type::now() + duration;
  while (clock_type::now() < until) {
  }
}

// scale(1/255), then spin: a map whose cost is set, like a decode or an augmentation.
struct costly_scale {
  std::chrono::nanoseconds cost;
  auto operator()(const tf::data::mnist::element_type& in) const {
    spin_for(cost);
    return tf::data::scale(1.f / 255)(in);
  }
};

// ---------------------------------------------------------------------------

void BM_mnist_map_50us(benchmark::State& state) {
  std::string error;
  const tf::data::mnist* train = mnist_train(error);
  if (!train) return state.SkipWithError(error.c_str());
  const int parallel = static_cast<int>(state.range(0));
  constexpr int elements = 2000;
  const costly_scale f{std::chrono::microseconds(50)};
  const auto run = [&](auto pipeline) {
    std::int64_t seen = 0;
    for (auto _ : state) {
      auto cursor = pipeline.open(0);
      typename decltype(pipeline)::element_type element{};
      while (cursor.next(element)) ++seen;
      benchmark::DoNotOptimize(element);
    }
    state.SetItemsProcessed(seen);
    if (seen != state.iterations() * elements) state.SkipWithError("the pipeline lost elements");
  };
  if (parallel == 0)
    run(*train | tf::data::map(f) | tf::data::take(elements));
  else
    run(*train | tf::data::map(f, parallel) | tf::data::take(elements));
}
BENCHMARK(BM_mnist_map_50us)->ArgName("parallel")->Arg(0)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------

void BM_step_loop(benchmark::State& state) {
  std::string error;
  const tf::data::mnist* train = mnist_train(error);
  if (!train) return state.SkipWithError(error.c_str());
  const int prefetch = static_cast<int>(state.range(0));
  constexpr int batches = 50;
  constexpr auto step_cost = std::chrono::milliseconds(1);
  auto source = *train | tf::data::map(costly_scale{std::chrono::microseconds(5)}) | tf::data::batch<128> |
                tf::data::take(batches);
  clock_type::duration waited{}, total{};
  const auto run = [&](auto pipeline) {
    typename decltype(pipeline)::element_type batch;
    for (auto _ : state) {
      const auto start = clock_type::now();
      auto cursor = pipeline.open(0);
      for (auto asked = clock_type::now(); cursor.next(batch); asked = clock_type::now()) {
        waited += clock_type::now() - asked;
        spin_for(step_cost);  // the training step
        benchmark::DoNotOptimize(batch.features.data());
      }
      total += clock_type::now() - start;
    }
  };
  if (prefetch == 0)
    run(source);
  else
    run(source | tf::data::prefetch(prefetch));
  state.SetItemsProcessed(state.iterations() * batches);
  state.counters["input_wait_fraction"] =
      std::chrono::duration<double>(waited) / std::chrono::duration<double>(total);
}
BENCHMARK(BM_step_loop)->ArgName("prefetch")->Arg(0)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------------------

// The network of examples/mnist_mlp.cpp.
using mnist_mlp = tf::sequential<tf::input<28, 28>, tf::flatten, tf::dense<512>, tf::relu, tf::dropout<0.2f>,
                                 tf::dense<512>, tf::relu, tf::dropout<0.2f>, tf::dense<10>>;

void BM_mnist_mlp_fit(benchmark::State& state) {
  std::string error;
  const tf::data::mnist* train = mnist_train(error);
  if (!train) return state.SkipWithError(error.c_str());
  const int prefetch = static_cast<int>(state.range(0));
  const auto map_cost = std::chrono::microseconds(state.range(1));
  constexpr int steps = 100;

  auto source = *train | tf::data::map(costly_scale{map_cost}) | tf::data::shuffle(60'000, 42) |
                tf::data::batch<128> | tf::data::take(steps);

  // The pipeline alone: how long it takes to make one batch.
  {
    auto cursor = source.open(0);
    typename decltype(source)::element_type batch;
    const auto start = clock_type::now();
    int made = 0;
    while (cursor.next(batch)) ++made;
    state.counters["pipeline_ms_per_batch"] =
        std::chrono::duration<double, std::milli>(clock_type::now() - start).count() / made;
  }

  tf::model<mnist_mlp> model{/*seed=*/42};
  model.compile(tf::optimizers::adam{.learning_rate = 1e-3f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true}, tf::metrics::accuracy{});
  double wait_sum = 0, seconds = 0;
  const auto run = [&](const auto& pipeline) {
    model.fit(pipeline, {.epochs = 1, .verbose = 0});  // warm-up: the step program, the arena, the pages
    for (auto _ : state) {
      const auto start = clock_type::now();
      const tf::history history = model.fit(pipeline, {.epochs = 1, .verbose = 0});
      seconds += std::chrono::duration<double>(clock_type::now() - start).count();
      wait_sum += history["input_wait_fraction"].back();
    }
  };
  if (prefetch == 0)
    run(source);
  else
    run(source | tf::data::prefetch(prefetch));
  const double iterations = static_cast<double>(state.iterations());
  state.SetItemsProcessed(state.iterations() * steps * 128);
  state.counters["input_wait_fraction"] = wait_sum / iterations;
  state.counters["ms_per_step"] = 1000 * seconds / (iterations * steps);
}
BENCHMARK(BM_mnist_mlp_fit)
    ->ArgNames({"prefetch", "map_us"})
    ->Args({0, 0})
    ->Args({2, 0})
    ->Args({0, 10})
    ->Args({2, 10})
    ->Iterations(5)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

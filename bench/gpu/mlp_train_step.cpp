// The MLP training step on the GPU: model<Net, float32, single_device, cuda>,
// one train_on_batch per iteration (the step's graph replay, the batch's
// upload and the wait for its loss), against bench/gpu/torch_mlp.py.
//
//   build/bench/mlp_train_step [--benchmark_min_time=2]
//
// Model: 784-1024-1024-10, relu, Adam, sparse cross-entropy on logits, as
// bench/train_step_bench.cpp's BM_mlp_train_step on the CPU.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include <typeflow/cuda.hpp>

namespace tf = typeflow;

namespace {

using big_mlp = tf::sequential<tf::input<784>, tf::dense<1024>, tf::relu, tf::dense<1024>, tf::relu, tf::dense<10>>;

template <int Batch>
void mlp_step(benchmark::State& state) {
  tf::model<big_mlp, tf::float32, tf::single_device, tf::cuda> model(1);
  model.compile(tf::optimizers::adam{.learning_rate = 1e-3f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  tf::data::batch_of<Batch, tf::data::tensor_value<float, tf::shape<784>>, tf::data::tensor_value<std::int32_t, tf::shape<>>> batch;
  const tf::random_stream rng{1, 2};
  for (int i = 0; i < Batch * 784; ++i) batch.features.data()[i] = rng.uniform(static_cast<std::uint64_t>(i));
  for (int i = 0; i < Batch; ++i) batch.labels.data()[i] = i % 10;
  batch.valid = Batch;
  for (int i = 0; i < 10; ++i) model.train_on_batch(batch);  // capture and warm up
  for (auto _ : state) benchmark::DoNotOptimize(model.train_on_batch(batch));
  state.counters["samples_per_second"] =
      benchmark::Counter(static_cast<double>(Batch) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["arena_MiB"] = static_cast<double>(model.arena_bytes()) / (1 << 20);
}

void BM_mlp_train_step_b256(benchmark::State& state) { mlp_step<256>(state); }
void BM_mlp_train_step_b4096(benchmark::State& state) { mlp_step<4096>(state); }
BENCHMARK(BM_mlp_train_step_b256)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_mlp_train_step_b4096)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (tf::backend::cuda::device_count(&why) == 0) {
    std::printf("mlp_train_step: no CUDA device (%s); nothing to measure\n", why.c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

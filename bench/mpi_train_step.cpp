// The 784-1024-1024-10 relu MLP's training step (Adam, global batch 256) under
// multi_worker, in samples/s of the whole job. A plain timer program (every
// rank must run the same number of steps, which Google Benchmark's adaptive
// iteration counts would not guarantee). bench/mpi_throughput.sh runs it as one
// process and under mpirun and prints the scaling efficiency.
//
//   build/bench/mpi_train_step [STEPS=40] [STRATEGY]               one worker, batch 256
//   mpirun -np 2 build/bench/mpi_train_step [STEPS=40] [STRATEGY]  two workers, 128 each
//
// STRATEGY: multi_worker (the default), zero1, zero2 or zero3: zero<1|2|3,
// multi_worker>, each worker keeping its shard of Adam's slots (and of the
// mean gradient; and of the weights), distribute/zero.hpp.
//
// Rank 0 prints one line of key=value pairs: the strategy, the workers, OpenMP
// threads per worker, the batches, the timed steps and seconds (between
// barriers, after 5 warm-up steps), samples_per_second (global samples),
// step_ms, allreduce_ms, the time of one gradient all-reduce alone (1.9 M
// floats), and arena_MiB, rank 0's arena (weights, gradients, slots, step).
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <typeflow/distribute/multi_worker.hpp>  // not in typeflow.hpp; the target links typeflow::mpi
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

namespace {

using big_mlp = tf::sequential<tf::input<784>, tf::dense<1024>, tf::relu, tf::dense<1024>, tf::relu,
                               tf::dense<10>>;
constexpr int global_batch = 256;
constexpr int warmup_steps = 5;

template <int PerWorker, class Strategy>
int run(int steps) {
  using features = tf::data::tensor_value<float, tf::shape<784>>;
  using label = tf::data::tensor_value<std::int32_t, tf::shape<>>;
  tf::model<big_mlp, tf::float32, Strategy> model{/*seed=*/1};
  const tf::multi_worker worker;

  tf::data::batch_of<PerWorker, features, label> batch;  // each worker its own samples
  std::mt19937 rng{7u + static_cast<unsigned>(worker.rank())};
  std::uniform_real_distribution<float> pixel{0.f, 1.f};
  std::uniform_int_distribution<std::int32_t> cls{0, 9};
  for (auto& x : batch.features) x = pixel(rng);
  for (auto& y : batch.labels) y = cls(rng);
  batch.valid = PerWorker;

  model.compile(tf::optimizers::adam{.learning_rate = 1e-3f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  for (int i = 0; i < warmup_steps; ++i) model.train_on_batch(batch);

  using clock = std::chrono::steady_clock;
  worker.barrier();
  const auto start = clock::now();
  double loss = 0;
  for (int i = 0; i < steps; ++i) loss = model.train_on_batch(batch);
  worker.barrier();
  const double seconds = std::chrono::duration<double>(clock::now() - start).count();

  // The all-reduce alone, on a buffer the size of the gradients.
  constexpr int reduces = 10;
  std::vector<float> gradients(big_mlp::parameter_floats, 1.f);
  worker.barrier();
  const auto reduce_start = clock::now();
  for (int i = 0; i < reduces; ++i) worker.all_reduce_mean(gradients.data(), gradients.size());
  worker.barrier();
  const double reduce_ms = std::chrono::duration<double, std::milli>(clock::now() - reduce_start).count() / reduces;

  if (worker.is_chief())
    std::printf(
        "strategy=%s workers=%d threads_per_worker=%d global_batch=%d per_worker_batch=%d steps=%d seconds=%.3f "
        "samples_per_second=%.1f step_ms=%.2f allreduce_ms=%.2f arena_MiB=%.2f loss=%.4f\n",
        Strategy::name().c_str(), worker.size(), omp_get_max_threads(), PerWorker * worker.size(), PerWorker, steps,
        seconds, steps * double{global_batch} / seconds, 1e3 * seconds / steps, reduce_ms,
        static_cast<double>(model.arena_bytes()) / (1 << 20), loss);
  return 0;
}

template <class Strategy>
int run_with(int steps) {
  switch (tf::distribute::worker_count()) {
    case 1: return run<global_batch, Strategy>(steps);
    case 2: return run<global_batch / 2, Strategy>(steps);
    case 4: return run<global_batch / 4, Strategy>(steps);
    case 8: return run<global_batch / 8, Strategy>(steps);
    default:
      std::fprintf(stderr, "mpi_train_step: run it with 1, 2, 4 or 8 processes (global batch 256)\n");
      return 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 40;
  const std::string strategy = argc > 2 ? argv[2] : "multi_worker";
  if (steps < 1 ||
      (strategy != "multi_worker" && strategy != "zero1" && strategy != "zero2" && strategy != "zero3")) {
    std::fprintf(stderr, "usage: %s [STEPS >= 1] [multi_worker | zero1 | zero2 | zero3]\n", argv[0]);
    return 2;
  }
  if (strategy == "zero1") return run_with<tf::zero<1, tf::multi_worker>>(steps);
  if (strategy == "zero2") return run_with<tf::zero<2, tf::multi_worker>>(steps);
  if (strategy == "zero3") return run_with<tf::zero<3, tf::multi_worker>>(steps);
  return run_with<tf::multi_worker>(steps);
}

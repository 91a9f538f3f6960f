// The 784-1024-1024-10 relu MLP's training step (Adam, global batch 256) under
// multi_worker, in samples/s of the whole job. A plain timer program (every
// rank must run the same number of steps, which Google Benchmark's adaptive
// iteration counts would not guarantee). bench/mpi_throughput.sh runs it as one
// process and under mpirun and prints the scaling efficiency.
//
//   build/bench/mpi_train_step [STEPS=40]                 one worker, batch 256
//   mpirun -np 2 build/bench/mpi_train_step [STEPS=40]    two workers, 128 each
//
// Rank 0 prints one line of key=value pairs: the workers, OpenMP threads per
// worker, the batches, the timed steps and seconds (between barriers, after 5
// warm-up steps), samples_per_second (global samples), step_ms, and
// allreduce_ms, the time of one gradient all-reduce alone (1.9 M floats).
#include <omp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <typeflow/distribute/multi_worker.hpp>  // not in typeflow.hpp; the target links typeflow::mpi
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

namespace {

using big_mlp = tf::sequential<tf::input<784>, tf::dense<1024>, tf::relu, tf::dense<1024>, tf::relu,
                               tf::dense<10>>;
constexpr int global_batch = 256;
constexpr int warmup_steps = 5;

template <int PerWorker>
int run(int steps) {
  using features = tf::data::tensor_value<float, tf::shape<784>>;
  using label = tf::data::tensor_value<std::int32_t, tf::shape<>>;
  tf::model<big_mlp, tf::float32, tf::multi_worker> model{/*seed=*/1};
  const auto& worker = model.strategy();

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
        "workers=%d threads_per_worker=%d global_batch=%d per_worker_batch=%d steps=%d seconds=%.3f "
        "samples_per_second=%.1f step_ms=%.2f allreduce_ms=%.2f loss=%.4f\n",
        worker.size(), omp_get_max_threads(), PerWorker * worker.size(), PerWorker, steps, seconds,
        steps * double{global_batch} / seconds, 1e3 * seconds / steps, reduce_ms, loss);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 40;
  if (steps < 1) {
    std::fprintf(stderr, "usage: %s [STEPS >= 1]\n", argv[0]);
    return 2;
  }
  switch (tf::distribute::worker_count()) {
    case 1: return run<global_batch>(steps);
    case 2: return run<global_batch / 2>(steps);
    case 4: return run<global_batch / 4>(steps);
    case 8: return run<global_batch / 8>(steps);
    default:
      std::fprintf(stderr, "mpi_train_step: run it with 1, 2, 4 or 8 processes (global batch 256)\n");
      return 2;
  }
}

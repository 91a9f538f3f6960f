// model<Net, Policy, multi_worker, cuda> across processes: one GPU per rank,
// NCCL bootstrapped over MPI. Not registered with ctest (no GPU machine here
// has MPI and several GPUs); built so that it keeps compiling, run by hand:
//
//   build/tests/typeflow_model_multi_worker        # one process: the reference
//   mpirun -np 2 build/tests/typeflow_model_multi_worker
//
// Each rank trains on its shard of the same data; the check is that every
// rank ends with the same weights, bit for bit (the gradients' mean is the
// same everywhere, and so is the update), and that the loss fell. Prints
// "all checks passed" on rank 0 and exits 0, or names the failed check.
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include <typeflow/cuda.hpp>
#include <typeflow/distribute/multi_worker.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<32>, tf::dense<64>, tf::relu, tf::layer_norm, tf::dense<10>>;

int run() {
  tf::model<net, tf::float32, tf::multi_worker, tf::cuda> model(5);
  const int rank = tf::distribute::worker_index(), size = tf::distribute::worker_count();
  std::vector<float> features;
  std::vector<std::int32_t> labels;
  const tf::random_stream rng{5, 1};
  for (int i = 0; i < 512; ++i) {
    float score = 0;
    for (int j = 0; j < 32; ++j) {
      const float x = rng.normal(static_cast<std::uint64_t>(i * 32 + j));
      features.push_back(x);
      score += j % 2 ? x : -x;
    }
    labels.push_back(score > 0 ? 1 : 0);
  }
  auto data = tf::data::from_tensor_slices<tf::shape<32>>(features, labels) | tf::data::shard(size, rank) |
              tf::data::batch<32>;
  model.compile(tf::optimizers::adam{.learning_rate = 0.01f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const auto history = model.fit(data, {.epochs = 3, .verbose = 0});
  const auto region = model.parameter_region();
  // Every rank's weights equal rank 0's, bit for bit.
  std::vector<float> root(region.begin(), region.end());
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  int same = std::memcmp(root.data(), region.data(), root.size() * sizeof(float)) == 0;
  MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  const bool learned = history["loss"].back() < history["loss"].front();
  if (!same || !learned) {
    std::printf("rank %d of %d: %s\n", rank, size, !same ? "weights differ between ranks" : "the loss did not fall");
    return 1;
  }
  if (rank == 0) std::printf("all checks passed (%d workers, loss %.4f -> %.4f)\n", size, history["loss"].front(),
                             history["loss"].back());
  return 0;
}

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "typeflow_model_multi_worker: %s\n", e.what());
    return 1;
  }
}

// model<Net, Policy, multi_worker, cuda> across processes: one GPU per rank,
// NCCL bootstrapped over MPI. Not registered with ctest (no GPU machine here
// has MPI and several GPUs); built so that it keeps compiling, run by hand:
//
//   build/tests/typeflow_model_multi_worker        # one process: the reference
//   mpirun -np 2 build/tests/typeflow_model_multi_worker
//
// Each rank trains on its shard of the same data, under multi_worker and
// under zero<1|2, multi_worker> (each rank updating its shard of Adam's
// slots, the weights all-gathered; zero<2> reduce-scatters the gradients);
// the checks: every rank ends with the same weights, bit for bit (the
// gradients' mean is the same everywhere, and so is the update), the loss
// fell, zero<k>'s weights and last gradient (zero<2>'s gathered from the
// shards' owners) are multi_worker's to 1e-4, and a sharded
// checkpoint (each rank its file of the slots) reloads into a fresh model
// that saves the same tensors again. With one process this runs NCCL with
// one rank, all a single GPU can show. Prints "all checks passed" on rank 0
// and exits 0, or names the failed check.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <span>
#include <vector>

#include <typeflow/cuda.hpp>
#include <typeflow/distribute/multi_worker.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<32>, tf::dense<64>, tf::relu, tf::layer_norm, tf::dense<10>>;

template <class Strategy>
using model_under = tf::model<net, tf::float32, Strategy, tf::cuda>;

auto dataset() {
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
  return tf::data::from_tensor_slices<tf::shape<32>>(features, labels) | tf::data::shard(size, rank) |
         tf::data::batch<32>;
}

void compile(auto& model) {
  model.compile(tf::optimizers::adam{.learning_rate = 0.01f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
}

// Whether every rank holds rank 0's values, bit for bit.
bool same_on_every_rank(std::span<const float> values) {
  std::vector<float> root(values.begin(), values.end());
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  int same = std::memcmp(root.data(), values.data(), root.size() * sizeof(float)) == 0;
  MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return same != 0;
}

// Trains under Strategy; returns the weights and then the first kernel's
// last gradient (zero<2>'s gathered from the shards' owners), or an empty
// vector after printing the failed check.
template <class Strategy>
std::vector<float> trained(const char* name) {
  model_under<Strategy> model(5);
  compile(model);
  const auto history = model.fit(dataset(), {.epochs = 3, .verbose = 0});
  const auto region = model.parameter_region();
  const auto gradient = model.gradient(model.get_weights().front().name);
  std::vector<float> kept(region.begin(), region.end());
  for (std::size_t i = 0; i < gradient.size(); ++i) kept.push_back(gradient[i]);
  const bool same = same_on_every_rank(kept);
  const bool learned = history["loss"].back() < history["loss"].front();
  if (!same || !learned) {
    std::printf("%s, rank %d: %s\n", name, tf::distribute::worker_index(),
                !same ? "weights differ between ranks" : "the loss did not fall");
    return {};
  }
  if (tf::distribute::worker_index() == 0)
    std::printf("%s: loss %.4f -> %.4f\n", name, history["loss"].front(), history["loss"].back());
  return kept;
}

double largest_relative_gap(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(double{a[i]} - b[i]) / std::max(std::fabs(double{a[i]}), 1e-3));
  return worst;
}

// zero<2, multi_worker>: a checkpoint of one epoch, each rank writing its
// shard of the slots, loaded into a fresh model, saved again: the same
// tensors (the chief compares, and tells every rank).
bool checkpoint_round_trip() {
  using sharded = model_under<tf::zero<2, tf::multi_worker>>;
  const std::filesystem::path root = std::filesystem::temp_directory_path();
  const std::filesystem::path first = root / "typeflow_mw_zero_a", second = root / "typeflow_mw_zero_b";
  sharded saved(5), loaded(6);
  compile(saved);
  (void)saved.fit(dataset(), {.epochs = 1, .verbose = 0});
  if (saved.is_chief()) std::filesystem::remove_all(first), std::filesystem::remove_all(second);
  MPI_Barrier(MPI_COMM_WORLD);
  const std::filesystem::path a = saved.save_checkpoint(first);
  compile(loaded);
  loaded.load_checkpoint(first);
  const std::filesystem::path b = loaded.save_checkpoint(second);
  int same = 1;
  if (saved.is_chief()) {
    const auto x = tf::io::read_checkpoint(a), y = tf::io::read_checkpoint(b);
    for (const auto& name : tf::checkpoint_tensor_names(x))
      same = same && tf::checkpoint_floats(x, name) == tf::checkpoint_floats(y, name);
    std::filesystem::remove_all(first);
    std::filesystem::remove_all(second);
  }
  MPI_Bcast(&same, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!same && saved.is_chief()) std::printf("zero<2, multi_worker>: the reloaded checkpoint differs\n");
  return same != 0;
}

int run() {
  const std::vector<float> reference = trained<tf::multi_worker>("multi_worker");
  const std::vector<float> one = trained<tf::zero<1, tf::multi_worker>>("zero<1, multi_worker>");
  const std::vector<float> two = trained<tf::zero<2, tf::multi_worker>>("zero<2, multi_worker>");
  if (reference.empty() || one.empty() || two.empty()) return 1;
  const double gap = std::max(largest_relative_gap(reference, one), largest_relative_gap(reference, two));
  const int rank = tf::distribute::worker_index(), size = tf::distribute::worker_count();
  if (gap > 1e-4) {
    if (rank == 0) std::printf("zero<k, multi_worker>'s weights differ from multi_worker's by %g\n", gap);
    return 1;
  }
  if (!checkpoint_round_trip()) return 1;
  if (rank == 0) std::printf("all checks passed (%d workers; zero<1|2> within %g of multi_worker)\n", size, gap);
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

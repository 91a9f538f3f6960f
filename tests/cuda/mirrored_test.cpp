// mirrored<N> on tf::cuda: N GPUs of one process, NCCL's mean of the
// gradients, the same update on every replica; and zero<1|2, mirrored<2>>
// against it: each GPU keeps and updates its shard of the optimizer slots,
// the weights all-gathered after the update (zero<2> reduce-scatters the
// gradients first). Needs two devices; with fewer each case says so and
// passes nothing off as checked.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <typeflow/cuda.hpp>

#include "model_reference.hpp"

namespace {
using namespace cuda_reference;
// No dropout: the replicas draw their own masks, so only a deterministic
// network can match one device.
using plain = tf::sequential<tf::input<32>, tf::dense<64>, tf::relu, tf::layer_norm, tf::dense<48>, tf::tanh,
                             tf::dense<10>>;
constexpr int global_batch = 32;

auto dataset(const toy_data& d) {
  return tf::data::from_tensor_slices<tf::shape<32>>(d.features, d.labels) | tf::data::batch<global_batch>;
}

bool have_two_devices() {
  if (tf::backend::cuda::device_count() >= 2) return true;
  MESSAGE("skipped: mirrored<2> and zero<k, mirrored<2>> need two CUDA devices, found "
          << tf::backend::cuda::device_count());
  return false;
}
// The largest |a - b| / max(|a|, 1e-3) over two checkpoints' tensors (the
// weights and every optimizer slot, gathered from a sharded one's files).
double largest_relative_gap(const std::filesystem::path& a, const std::filesystem::path& b) {
  const auto x = tf::io::read_checkpoint(a), y = tf::io::read_checkpoint(b);
  double worst = 0;
  for (const auto& name : tf::checkpoint_tensor_names(x)) {
    const auto p = tf::checkpoint_floats(x, name), q = tf::checkpoint_floats(y, name);
    REQUIRE(p.size() == q.size());
    for (std::size_t i = 0; i < p.size(); ++i)
      worst = std::max(worst, std::fabs(double{p[i]} - q[i]) / std::max(std::fabs(double{p[i]}), 1e-3));
  }
  return worst;
}

std::filesystem::path fresh_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(dir);
  return dir;
}

template <class Strategy>
using model_under = tf::model<plain, tf::float32, Strategy, tf::cuda>;

template <class Model, class Optimizer>
void train(Model& m, const toy_data& d, Optimizer optimizer, int epochs) {
  m.compile(optimizer, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  (void)m.fit(dataset(d), {.epochs = epochs, .verbose = 0});
}

template <int Stage, class Optimizer>
void check_against_mirrored(Optimizer optimizer) {
  const toy_data d = make_data();
  model_under<tf::mirrored<2>> reference(seed);
  model_under<tf::zero<Stage, tf::mirrored<2>>> sharded(seed);
  train(reference, d, optimizer, 2);
  train(sharded, d, optimizer, 2);
  CHECK(sharded.iterations() == reference.iterations());
  CHECK(sharded.replica_parameter_region(0) == sharded.replica_parameter_region(1));  // the all-gather
  // The last step's mean gradient (zero<2>: each shard from its owner).
  for (const auto& w : reference.get_weights()) {
    CAPTURE(w.name);
    const auto a = reference.gradient(w.name), b = sharded.gradient(w.name);
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
      worst = std::max(worst, std::fabs(double{a[i]} - b[i]) / std::max(std::fabs(double{a[i]}), 1e-3));
    CHECK(worst < 1e-3);
  }
  // The shards' statistics are summed by NCCL, and zero<2>'s reduce roots
  // differ from the all-reduce's: not the same bits, the same state to 1e-4.
  const std::filesystem::path a = fresh_dir("typeflow_cuda_zero_a"), b = fresh_dir("typeflow_cuda_zero_b");
  const double gap = largest_relative_gap(sharded.save_checkpoint(a), reference.save_checkpoint(b));
  MESSAGE("zero<" << Stage << ", mirrored<2>> against mirrored<2>: largest relative gap " << gap);
  CHECK(gap < 1e-4);
  // Each replica's arena holds one shard of each slot: Adam's two (and an
  // accumulator) less than half of mirrored<2>'s replica 0.
  CHECK(sharded.arena_bytes(0) < reference.arena_bytes(0));
  std::filesystem::remove_all(a);
  std::filesystem::remove_all(b);
}
}  // namespace

TEST_CASE("cuda mirrored<2>: trains like one device at the same global batch, replicas identical") {
  if (!have_two_devices()) return;
  const toy_data d = make_data();
  tf::model<plain, tf::float32, tf::single_device, tf::cuda> one(seed);
  tf::model<plain, tf::float32, tf::mirrored<2>, tf::cuda> two(seed);
  one.compile(tf::optimizers::adam{.learning_rate = 0.01f},
              tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  two.compile(tf::optimizers::adam{.learning_rate = 0.01f},
              tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const auto h1 = one.fit(dataset(d), {.epochs = 2, .verbose = 0});
  const auto h2 = two.fit(dataset(d), {.epochs = 2, .verbose = 0});
  for (std::size_t e = 0; e < 2; ++e) CHECK(h2["loss"][e] == doctest::Approx(h1["loss"][e]).epsilon(1e-4));
  const auto a = one.parameter_region();
  const std::vector<float> b = two.replica_parameter_region(0), c = two.replica_parameter_region(1);
  REQUIRE(a.size() == b.size());
  double worst = 0, largest = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(double{a[i]} - b[i]));
    largest = std::max(largest, std::fabs(double{a[i]}));
  }
  INFO("largest difference " << worst << " of weights up to " << largest);
  CHECK(worst < 1e-4 * largest);
  CHECK(b == c);  // the same update on the same mean: no broadcast needed
  CHECK(two.iterations() == one.iterations());
}

TEST_CASE("cuda mirrored<2>: evaluate and predict run on replica 0 after training") {
  if (!have_two_devices()) return;
  const toy_data d = make_data();
  tf::model<plain, tf::float32, tf::mirrored<2>, tf::cuda> two(seed);
  two.compile(tf::optimizers::sgd{.learning_rate = 0.1f},
              tf::losses::sparse_categorical_crossentropy{.from_logits = true},
              tf::metrics::sparse_categorical_accuracy{});
  const double before = two.evaluate(dataset(d)).at("loss");
  two.fit(dataset(d), {.epochs = 3, .verbose = 0});
  const double after = two.evaluate(dataset(d)).at("loss");
  CHECK(after < before);
  CHECK(two.predict(dataset(d)).size() == static_cast<std::size_t>(samples) * 10);
  two.fit(dataset(d), {.epochs = 1, .verbose = 0});  // training again after evaluation rebuilt replica 0
  CHECK(two.replica_parameter_region(0) == two.replica_parameter_region(1));
}

TEST_CASE("cuda mirrored<2, sync_batch_norm_statistics>: the replicas' moving statistics are their mean, as on the CPU") {
  if (!have_two_devices()) return;
  using normalized = tf::sequential<tf::input<32>, tf::dense<16>, tf::batch_norm, tf::relu, tf::dense<10>>;
  using synced = tf::mirrored<2, tf::sync_batch_norm_statistics>;
  const toy_data d = make_data();
  tf::model<normalized, tf::float32, synced> cpu(seed);
  tf::model<normalized, tf::float32, synced, tf::cuda> gpu(seed);
  cpu.compile(tf::optimizers::sgd{.learning_rate = 0.05f},
              tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  gpu.compile(tf::optimizers::sgd{.learning_rate = 0.05f},
              tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  cpu.fit(dataset(d), {.epochs = 1, .verbose = 0});
  gpu.fit(dataset(d), {.epochs = 1, .verbose = 0});
  const std::vector<float> g0 = gpu.replica_parameter_region(0), g1 = gpu.replica_parameter_region(1);
  const auto c0 = cpu.parameter_region();
  CHECK(g0 == g1);  // the weights by the same update, the statistics by their mean
  double worst = 0, largest = 0;
  for (std::size_t i = 0; i < c0.size(); ++i) {
    worst = std::max(worst, std::fabs(double{c0[i]} - g0[i]));
    largest = std::max(largest, std::fabs(double{c0[i]}));
  }
  INFO("largest difference to the CPU's " << worst << " of values up to " << largest);
  CHECK(worst < 1e-3 * largest);
}

TEST_CASE("cuda zero<1, mirrored<2>>: the weights of mirrored<2>, each replica updating its shard of Adam's slots") {
  if (!have_two_devices()) return;
  check_against_mirrored<1>(tf::optimizers::adam{.learning_rate = 0.01f});
}

TEST_CASE("cuda zero<2, mirrored<2>>: the gradients reduce-scattered, clipping by the global norm over the shards") {
  if (!have_two_devices()) return;
  check_against_mirrored<2>(tf::optimizers::adamw{.learning_rate = 0.01f, .global_clipnorm = 0.5f});
  check_against_mirrored<2>(tf::optimizers::accumulate<2>(tf::optimizers::adam{.learning_rate = 0.01f}));
}

TEST_CASE("cuda zero<2, mirrored<2>>: a sharded checkpoint reloads every shard of the slots, bit for bit") {
  if (!have_two_devices()) return;
  const toy_data d = make_data();
  const tf::optimizers::adam optimizer{.learning_rate = 0.01f};
  model_under<tf::zero<2, tf::mirrored<2>>> saved(seed), loaded(seed + 1);
  train(saved, d, optimizer, 1);
  const std::filesystem::path dir = fresh_dir("typeflow_cuda_zero_checkpoint");
  const std::filesystem::path again = fresh_dir("typeflow_cuda_zero_again");
  const std::filesystem::path written = saved.save_checkpoint(dir);
  CHECK(std::filesystem::exists(written / tf::io::checkpoint_shard_name(0, 2)));
  CHECK(std::filesystem::exists(written / tf::io::checkpoint_shard_name(1, 2)));
  loaded.compile(optimizer, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  loaded.load_checkpoint(dir);
  CHECK(largest_relative_gap(written, loaded.save_checkpoint(again)) == 0);
  // Both go on alike.
  (void)saved.fit(dataset(d), {.epochs = 2, .verbose = 0});
  (void)loaded.fit(dataset(d), {.epochs = 2, .verbose = 0});
  CHECK(saved.replica_parameter_region(0) == loaded.replica_parameter_region(0));
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(again);
}

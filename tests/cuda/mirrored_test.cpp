// mirrored<N> on tf::cuda: N GPUs of one process, NCCL's mean of the
// gradients, the same update on every replica. Needs two devices; with
// fewer each case says so and passes nothing off as checked.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

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
  MESSAGE("skipped: mirrored<2> needs two CUDA devices, found " << tf::backend::cuda::device_count());
  return false;
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

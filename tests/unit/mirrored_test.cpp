// mirrored<N>: replicas in threads give the single-replica answer, the same
// bits on every run, and identical weights on every replica.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

namespace {

using net = tf::sequential<tf::input<12>, tf::dense<32>, tf::relu, tf::dense<16>, tf::tanh, tf::dense<4>>;
using features = tf::data::tensor_value<float, tf::shape<12>>;
using label = tf::data::tensor_value<std::int32_t, tf::shape<>>;

tf::data::batch_of<128, features, label> batch_number(int index) {
  tf::data::batch_of<128, features, label> b;
  const tf::random_stream rng{91, static_cast<std::uint64_t>(index)};
  for (std::size_t i = 0; i < b.features.size(); ++i) b.features[i] = 2.f * rng.uniform(i) - 1.f;
  for (int i = 0; i < 128; ++i) b.labels[i] = (i * 5 + index) % 4;
  b.valid = 128;
  return b;
}

template <class Model>
void train_ten_steps(Model& model) {
  model.compile(tf::optimizers::adam{.learning_rate = 0.01}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::accuracy{});
  for (int step = 0; step < 10; ++step) model.train_on_batch(batch_number(step));
}

double largest_relative_difference(std::span<const float> a, std::span<const float> b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(double{a[i]} - b[i]) / std::max(std::fabs(double{a[i]}), 1e-2));
  return worst;
}

}  // namespace

TEST_CASE("mirrored<2> at global batch 128 matches one replica at batch 128 after 10 steps") {
  tf::model<net> single{4};
  tf::model<net, tf::float32, tf::mirrored<2>> mirrored{4};
  train_ten_steps(single);
  train_ten_steps(mirrored);
  const double worst = largest_relative_difference(single.parameter_region(), mirrored.parameter_region());
  MESSAGE("largest relative difference: " << worst);
  CHECK(worst <= 1e-5);
  CHECK(mirrored.iterations() == 10);
}

TEST_CASE("mirrored<2> keeps the replicas' weights identical and is bit-for-bit reproducible") {
  tf::model<net, tf::float32, tf::mirrored<2>> first{8}, second{8};
  train_ten_steps(first);
  train_ten_steps(second);
  const auto a = first.parameter_region(), b = second.parameter_region();
  CHECK(std::equal(a.begin(), a.end(), b.begin()));
  const auto replica1 = first.replica_parameter_region(1);
  CHECK(std::equal(a.begin(), a.end(), replica1.begin()));
}

TEST_CASE("mirrored<N> keeps batch_norm statistics per replica, or averages them when asked") {
  using bn_net = tf::sequential<tf::input<12>, tf::dense<8>, tf::batch_norm, tf::relu, tf::dense<4>>;
  tf::model<bn_net, tf::float32, tf::mirrored<2>> own{2};
  tf::model<bn_net, tf::float32, tf::mirrored<2, tf::sync_batch_norm_statistics>> synced{2};
  train_ten_steps(own);
  train_ten_steps(synced);
  auto statistics_equal = [](auto& model) {
    const auto mean0 = model.parameter("layers.2.moving_mean");
    const std::vector<float> first(mean0.begin(), mean0.end());
    const auto region1 = model.replica_parameter_region(1);
    const auto offset = mean0.storage() - model.parameter_region().data();
    return std::equal(first.begin(), first.end(), region1.begin() + offset);
  };
  CHECK(!statistics_equal(own));    // each replica saw other samples
  CHECK(statistics_equal(synced));  // averaged after every step
  // The trainable weights are the same on both replicas either way.
  const auto kernel = own.parameter("layers.1.kernel");
  const auto offset = kernel.storage() - own.parameter_region().data();
  CHECK(std::equal(own.parameter_region().begin() + offset, own.parameter_region().begin() + offset + 12 * 16,
                   own.replica_parameter_region(1).begin() + offset));
}

TEST_CASE("fit and evaluate run under mirrored<2>, with metrics over the whole batch") {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  for (int i = 0; i < 512; ++i) {
    const int c = i % 4;
    for (int j = 0; j < 12; ++j) x.push_back(j == c ? 1.f : 0.f);
    y.push_back(c);
  }
  auto data = tf::data::from_tensor_slices<tf::shape<12>>(x, y) | tf::data::shuffle(512, 1) | tf::data::batch<64>;
  tf::model<net, tf::float32, tf::mirrored<2>> model{1};
  model.compile(tf::optimizers::adam{.learning_rate = 0.01}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::accuracy{});
  const auto history = model.fit(data, {.epochs = 3, .validation_data = data, .verbose = 0});
  CHECK(model.iterations() == 3 * 8);
  CHECK(history["val_accuracy"].back() > 0.95);
  CHECK(model.evaluate(data).at("accuracy") > 0.95);
}

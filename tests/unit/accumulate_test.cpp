// accumulate<K>: K micro-batches of B update the weights exactly as one batch
// of K * B, with every optimizer, clipping and schedule.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

namespace {

using net = tf::sequential<tf::input<12>, tf::dense<16>, tf::tanh, tf::dense<8>, tf::relu, tf::dense<4>>;
using features = tf::data::tensor_value<float, tf::shape<12>>;
using label = tf::data::tensor_value<std::int32_t, tf::shape<>>;

// 10 updates' worth of data: batch b of the large run is micro-batches
// 4b .. 4b+3 of the small one.
struct data_set {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  data_set() {
    const tf::random_stream rng{77, 0};
    for (int i = 0; i < 10 * 128 * 12; ++i) x.push_back(2.f * rng.uniform(i) - 1.f);
    for (int i = 0; i < 10 * 128; ++i) y.push_back(static_cast<std::int32_t>(i * 7 % 4));
  }
  template <int N>
  tf::data::batch_of<N, features, label> batch(int index) const {
    tf::data::batch_of<N, features, label> b;
    std::copy_n(x.begin() + index * N * 12, N * 12, b.features.begin());
    std::copy_n(y.begin() + index * N, N, b.labels.begin());
    b.valid = N;
    return b;
  }
};

template <class Optimizer>
void check_accumulation_matches_large_batch(const Optimizer& optimizer) {
  static const data_set data;
  const tf::losses::sparse_categorical_crossentropy loss{.from_logits = true};
  tf::model<net> large{3}, small{3};
  large.compile(optimizer, loss);
  small.compile(tf::optimizers::accumulate<4>(optimizer), loss);
  for (int step = 0; step < 10; ++step) {
    large.train_on_batch(data.batch<128>(step));
    for (int micro = 0; micro < 4; ++micro) small.train_on_batch(data.batch<32>(4 * step + micro));
  }
  CHECK(large.iterations() == 10);
  CHECK(small.iterations() == 10);  // updates, not micro-batches
  double worst = 0;
  for (const auto& spec : large.parameter_specs()) {
    const auto a = large.parameter(spec.name), b = small.parameter(spec.name);
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double error = std::fabs(double{a[i]} - b[i]) / std::max(std::fabs(double{a[i]}), 1e-2);
      worst = std::max(worst, error);
    }
  }
  INFO("largest relative difference " << worst);
  CHECK(worst <= 1e-5);
}

}  // namespace

TEST_CASE("accumulate<4> at batch 32 gives the weights of plain steps at batch 128") {
  namespace opt = tf::optimizers;
  namespace sched = tf::schedules;
  SUBCASE("sgd with momentum") { check_accumulation_matches_large_batch(opt::sgd{.learning_rate = 0.1, .momentum = 0.9f}); }
  SUBCASE("adam") { check_accumulation_matches_large_batch(opt::adam{.learning_rate = 0.01}); }
  SUBCASE("adamw, global_clipnorm and a cosine schedule with warmup") {
    check_accumulation_matches_large_batch(opt::adamw{.learning_rate = sched::cosine_decay{0.01, 8, {.warmup_steps = 2}},
                                                      .weight_decay = 0.1f,
                                                      .global_clipnorm = 0.5f});
  }
  SUBCASE("lion with clipnorm") { check_accumulation_matches_large_batch(opt::lion{.learning_rate = 1e-3, .clipnorm = 0.1f}); }
  SUBCASE("rmsprop with clipvalue and exponential decay") {
    check_accumulation_matches_large_batch(
        opt::rmsprop{.learning_rate = sched::exponential_decay{0.01, 3, 0.5}, .clipvalue = 0.01f});
  }
}

TEST_CASE("an accumulating optimizer leaves the weights alone until the K-th micro-batch") {
  static const data_set data;
  tf::model<net> model{1};
  model.compile(tf::optimizers::accumulate<3>(tf::optimizers::sgd{.learning_rate = 0.1}),
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const std::vector<float> before(model.parameter_region().begin(), model.parameter_region().end());
  model.train_on_batch(data.batch<32>(0));
  model.train_on_batch(data.batch<32>(1));
  CHECK(std::equal(before.begin(), before.end(), model.parameter_region().begin()));
  CHECK(model.iterations() == 0);
  model.train_on_batch(data.batch<32>(2));
  CHECK(!std::equal(before.begin(), before.end(), model.parameter_region().begin()));
  CHECK(model.iterations() == 1);
}

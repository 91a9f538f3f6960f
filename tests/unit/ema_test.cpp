// Keras 3's optimizer EMA: use_ema keeps a moving average of the trainable
// weights in one more slot (m = 0 at the first update, ema_momentum after),
// ema_overwrite_frequency copies it into the weights, fit ends with the
// weights replaced by it (finalize_variable_values), swap_ema_weights
// validates with it, and a checkpoint keeps it.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <stdexcept>
#include <vector>

#include <typeflow/typeflow.hpp>

#include "../support/resume_fixture.hpp"
#include "../support/test_support.hpp"

namespace tf = typeflow;
namespace tf_testing = typeflow::testing;

using typeflow::testing::same_bits;

namespace {

// A batch_norm's statistics are not averaged; its scale and offset are.
using net = tf::sequential<tf::input<12>, tf::dense<24>, tf::batch_normalization<>, tf::relu, tf::dense<4>>;
constexpr int samples = 128;

auto dataset(std::uint64_t seed = 17) {
  std::vector<float> x(samples * 12);
  std::vector<std::int32_t> y(samples);
  const tf::random_stream rng{seed, 3};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 2.f * rng.uniform(i) - 1.f;
  for (int i = 0; i < samples; ++i) y[i] = (x[i * 12] > 0.f ? 1 : 0) + (x[i * 12 + 3] > 0.2f ? 2 : 0);
  return tf::data::from_tensor_slices<tf::shape<12>>(std::move(x), std::move(y)) | tf::data::shuffle(samples, 4) |
         tf::data::batch<32>;
}

template <class Model>
void compile(Model& m, bool use_ema, std::optional<int> overwrite = std::nullopt) {
  m.compile(tf::optimizers::adam{.learning_rate = 0.01, .use_ema = use_ema, .ema_momentum = 0.9f,
                                 .ema_overwrite_frequency = overwrite},
            tf::losses::sparse_categorical_crossentropy{.from_logits = true}, tf::metrics::accuracy{});
}

// The batches of epoch `key`, in order.
std::vector<typename decltype(dataset())::element_type> batches(std::uint64_t key) {
  std::vector<typename decltype(dataset())::element_type> out;
  auto cursor = dataset().open(key);
  typename decltype(dataset())::element_type b;
  while (cursor.next(b)) out.push_back(b);
  return out;
}

}  // namespace

TEST_CASE("use_ema: the average follows Keras's rule over the trainable tensors, not the statistics") {
  tf::model<net> with{3}, without{3};
  compile(with, true);
  compile(without, false);
  // The averaged trainable weights, in double: a_1 = w_1, a_t = 0.9 a_{t-1} + 0.1 w_t.
  std::vector<std::string> trainable;
  for (const auto& spec : without.parameter_specs())
    if (spec.name.find("moving_") == std::string::npos) trainable.push_back(spec.name);
  REQUIRE(trainable.size() == 6);  // two kernels, two biases, gamma, beta
  std::map<std::string, std::vector<double>> average;
  for (const auto& b : batches(0)) {
    with.train_on_batch(b);
    without.train_on_batch(b);
    for (const auto& name : trainable) {
      const auto w = without.parameter(name);
      auto& a = average[name];
      if (a.empty())
        a.assign(w.begin(), w.end());
      else
        for (std::size_t i = 0; i < w.size(); ++i) a[i] = 0.9 * a[i] + 0.1 * w[i];
    }
  }
  // The moving average does not change the training itself.
  CHECK(same_bits(with.parameter_region(), without.parameter_region()));
  with.swap_ema_weights();
  CHECK(with.ema_weights_in_model());
  double worst = 0;
  for (const auto& name : trainable) {
    const auto a = with.parameter(name);
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - average[name][i]));
  }
  CHECK(worst < 1e-6);
  CHECK(!same_bits(with.parameter_region(), without.parameter_region()));
  // The moving mean and variance of batch_norm are the model's own, swapped or not.
  for (const char* name : {"layers.2.moving_mean", "layers.2.moving_variance"}) {
    const auto a = with.parameter(name), b = without.parameter(name);
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == b[i]);
  }
  with.swap_ema_weights();  // back
  CHECK(same_bits(with.parameter_region(), without.parameter_region()));
}

TEST_CASE("use_ema: ema_overwrite_frequency puts the average into the weights every n updates") {
  tf::model<net> m{5};
  compile(m, true, 2);
  const auto b = batches(0);
  m.train_on_batch(b[0]);
  m.train_on_batch(b[1]);  // update 2: overwritten
  const std::vector<float> after_two(m.parameter_region().begin(), m.parameter_region().end());
  m.swap_ema_weights();
  CHECK(same_bits(m.parameter_region(), after_two));  // the average and the weights are one
  m.swap_ema_weights();
  m.train_on_batch(b[2]);  // update 3: not overwritten
  const std::vector<float> after_three(m.parameter_region().begin(), m.parameter_region().end());
  m.swap_ema_weights();
  CHECK(!same_bits(m.parameter_region(), after_three));
}

TEST_CASE("use_ema: fit ends with the average in the weights, swap_ema_weights validates with it") {
  const auto validation = dataset(23);
  tf::model<net> fitted{7}, stepped{7};
  compile(fitted, true);
  compile(stepped, true);
  tf::callbacks::swap_ema_weights swap;
  const auto h = fitted.fit(dataset(), {.epochs = 1, .validation_data = validation, .callbacks = {&swap}, .verbose = 0});
  for (const auto& b : batches(0)) stepped.train_on_batch(b);
  CHECK(!stepped.ema_weights_in_model());
  stepped.swap_ema_weights();
  CHECK(same_bits(fitted.parameter_region(), stepped.parameter_region()));  // finalize_variable_values
  CHECK(!fitted.ema_weights_in_model());
  // The validation ran on the averages: evaluating them now gives its loss.
  CHECK(fitted.evaluate(validation).at("loss") == h["val_loss"][0]);

  // Without the callback, fit validates with the raw weights.
  tf::model<net> raw{7};
  compile(raw, true);
  const auto h2 = raw.fit(dataset(), {.epochs = 1, .validation_data = validation, .verbose = 0});
  CHECK(h2["val_loss"][0] != h["val_loss"][0]);
  CHECK(same_bits(raw.parameter_region(), fitted.parameter_region()));

  // swap_on_epoch: the averages are in the weights after each epoch, for the callbacks after it.
  tf::model<net> epochs{7};
  compile(epochs, true);
  tf::callbacks::swap_ema_weights swap_epoch({.swap_on_epoch = true});
  std::vector<bool> in_model;
  tf::callbacks::lambda_callback look({.on_epoch_end = [&](int, const tf::logs&) {
    in_model.push_back(epochs.ema_weights_in_model());
  }});
  epochs.fit(dataset(), {.epochs = 2, .callbacks = {&swap_epoch, &look}, .verbose = 0});
  CHECK(in_model == std::vector<bool>{true, true});
  CHECK(!epochs.ema_weights_in_model());  // fit's end leaves the average in the weights, no swap pending
}

TEST_CASE("use_ema: a backup keeps the average, the continued fit ends bit for bit as an uninterrupted one") {
  tf_testing::temp_dir dir("typeflow_ema_test_backup");
  tf::model<net> whole{9};
  compile(whole, true);
  whole.fit(dataset(), {.epochs = 2, .verbose = 0});
  {
    tf::model<net> first{9};
    compile(first, true);
    tf::callbacks::backup_and_restore backup(dir.path, {.save_freq = 3});
    tf::callbacks::lambda_callback crash({.on_train_batch_end = [&](std::int64_t, const tf::logs&) {
      if (first.iterations() == 7) throw std::runtime_error("crash");
    }});
    CHECK_THROWS(first.fit(dataset(), {.epochs = 2, .callbacks = {&backup, &crash}, .verbose = 0}));
  }
  tf::model<net> resumed{1};
  compile(resumed, true);
  tf::callbacks::backup_and_restore backup(dir.path, {.save_freq = 3});
  resumed.fit(dataset(), {.epochs = 2, .callbacks = {&backup}, .verbose = 0});
  CHECK(same_bits(resumed.parameter_region(), whole.parameter_region()));
}

TEST_CASE("use_ema: Keras's argument checks, and swap_ema_weights without it") {
  tf::model<net> m{1};
  CHECK_THROWS_WITH_AS(m.compile(tf::optimizers::sgd{.use_ema = true, .ema_momentum = 1.5f},
                                 tf::losses::sparse_categorical_crossentropy{.from_logits = true}),
                       doctest::Contains("ema_momentum must lie in [0, 1]"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(m.compile(tf::optimizers::lion{.use_ema = true, .ema_overwrite_frequency = 0},
                                 tf::losses::sparse_categorical_crossentropy{.from_logits = true}),
                       doctest::Contains("ema_overwrite_frequency must be at least 1"), std::invalid_argument);
  m.compile(tf::optimizers::sgd{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  CHECK_THROWS_WITH_AS(m.swap_ema_weights(), doctest::Contains("without use_ema"), std::logic_error);
}

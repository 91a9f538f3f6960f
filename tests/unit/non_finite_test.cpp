// The NaN policy: a non-finite loss or gradient stops training before the
// update, naming the epoch, the batch, the update and the first tensor; with
// callbacks::terminate_on_nan the run ends cleanly instead. And the other
// bad value that reaches a loss: a sparse label outside [0, classes).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

namespace {

using net = tf::sequential<tf::input<8>, tf::dense<16>, tf::relu, tf::dense<3>>;
constexpr int batch = 16, batches = 4;

// Four batches of 16; with poison, one feature of batch 3 (1-based) is NaN.
auto dataset(bool poison) {
  std::vector<float> x(batch * batches * 8);
  std::vector<std::int32_t> y(batch * batches);
  const tf::random_stream rng{5, 1};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 2.f * rng.uniform(i) - 1.f;
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int32_t>(i % 3);
  if (poison) x[(2 * batch + 5) * 8 + 3] = std::numeric_limits<float>::quiet_NaN();
  return tf::data::from_tensor_slices<tf::shape<8>>(std::move(x), std::move(y)) | tf::data::batch<batch>;
}

template <class Model>
void compile(Model& m) {
  m.compile(tf::optimizers::adam{.learning_rate = 0.01}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
}

bool all_finite(std::span<const float> v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

struct counting_callback : tf::callback {
  int epochs_ended = 0, trains_ended = 0;
  void on_epoch_end(const tf::epoch_info&, const tf::logs&) override { ++epochs_ended; }
  void on_train_end(const tf::logs&) override { ++trains_ended; }
};

}  // namespace

TEST_CASE("a NaN among the input features of a relu network stops fit at its batch, naming the first kernel") {
  // relu maps the NaN to 0, so the loss stays finite: only the gradient shows it.
  tf::model<net> poisoned{3}, clean{3};
  compile(poisoned);
  compile(clean);
  try {
    poisoned.fit(dataset(true), {.epochs = 2, .verbose = 0});
    FAIL("fit trained on a NaN");
  } catch (const tf::non_finite_error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find("fit: epoch 1, batch 3 (update 3): the gradient of layers.1.kernel is not finite (NaN") == 0);
    CHECK(e.tensor() == "layers.1.kernel");
  }
  CHECK(poisoned.iterations() == 2);  // the third update was not applied
  CHECK(all_finite(poisoned.parameter_region()));
  // The weights are the second step's, bit for bit.
  auto cursor = dataset(false).open(0);
  decltype(dataset(false))::element_type b;
  for (int i = 0; i < 2; ++i) {
    REQUIRE(cursor.next(b));
    clean.train_on_batch(b);
  }
  const auto p = poisoned.parameter_region(), c = clean.parameter_region();
  CHECK(std::memcmp(p.data(), c.data(), p.size_bytes()) == 0);
}

TEST_CASE("train_on_batch refuses a non-finite step too, and keeps the weights") {
  tf::model<net> m{4};
  compile(m);
  auto cursor = dataset(true).open(0);
  decltype(dataset(true))::element_type b;
  REQUIRE(cursor.next(b));
  m.train_on_batch(b);
  REQUIRE(cursor.next(b));
  m.train_on_batch(b);
  REQUIRE(cursor.next(b));  // the poisoned batch
  const std::vector<float> before(m.parameter_region().begin(), m.parameter_region().end());
  CHECK_THROWS_WITH_AS(m.train_on_batch(b), doctest::Contains("train_on_batch (update 3): the gradient of layers.1.kernel"),
                       tf::non_finite_error);
  CHECK(std::memcmp(before.data(), m.parameter_region().data(), before.size() * sizeof(float)) == 0);
}

TEST_CASE("a diverging run (learning rate 1e3) stops with the step and the tensor named") {
  using linear = tf::sequential<tf::input<8>, tf::dense<3>>;
  tf::model<linear> m{1};
  m.compile(tf::optimizers::sgd{.learning_rate = 1e3}, tf::losses::mean_squared_error{});
  std::vector<float> x(batch * 8, 0.7f), y(batch * 3, 1.f);
  const auto data = tf::data::from_tensor_slices<tf::shape<8>, tf::shape<3>>(x, y) | tf::data::batch<batch>;
  try {
    m.fit(data, {.epochs = 1000, .verbose = 0});
    FAIL("a learning rate of 1e3 did not diverge");
  } catch (const tf::non_finite_error& e) {
    const std::string message = e.what();
    MESSAGE(message);
    CHECK(message.find("fit: epoch ") == 0);
    CHECK(message.find("is not finite") != std::string::npos);
    CHECK((e.tensor() == "loss" || e.tensor().find("layers.1.") == 0));
  }
  CHECK(all_finite(m.parameter_region()));  // the last applied update left finite weights
}

TEST_CASE("terminate_on_nan ends fit cleanly: the epoch ends, the other callbacks run, fit returns") {
  tf::model<net> m{3};
  compile(m);
  tf::callbacks::terminate_on_nan stop;
  counting_callback counter;
  const auto h = m.fit(dataset(true), {.epochs = 3, .callbacks = {&stop, &counter}, .verbose = 0});
  CHECK(stop.terminated());
  CHECK(stop.epoch() == 0);
  CHECK(stop.batch() == 3);
  CHECK(stop.reason().find("the gradient of layers.1.kernel") != std::string::npos);
  CHECK(h["loss"].size() == 1);  // the epoch it stopped in, over its two good batches
  CHECK(std::isfinite(h["loss"][0]));
  CHECK(counter.epochs_ended == 1);
  CHECK(counter.trains_ended == 1);
  CHECK(m.iterations() == 2);
  CHECK(all_finite(m.parameter_region()));
}

namespace {
// An optimizer with its own update loop and no rule: the model checks the
// gradients before calling it.
struct plain_descent {
  static constexpr std::string_view name = "plain_descent";
  int slot_count() const { return 0; }
  void validate() const {}
  double learning_rate(std::int64_t) const { return 0.05; }
  void update(const tf::optimizers::update_arguments& a) const {
    for (std::ptrdiff_t i = 0; i < a.floats; ++i) a.weights[i] -= 0.05f * a.grads[i];
  }
};
}  // namespace

TEST_CASE("the NaN policy holds for accumulate<K> between micro-batches and for an optimizer without a rule") {
  auto cursor = dataset(true).open(0);
  decltype(dataset(true))::element_type b[3];
  for (auto& x : b) REQUIRE(cursor.next(x));  // b[2] is poisoned

  tf::model<net> accumulating{6};
  accumulating.compile(tf::optimizers::accumulate<2>(tf::optimizers::sgd{.learning_rate = 0.1}),
                       tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  accumulating.train_on_batch(b[0]);
  accumulating.train_on_batch(b[1]);  // the first update
  const std::vector<float> before(accumulating.parameter_region().begin(), accumulating.parameter_region().end());
  CHECK_THROWS_WITH_AS(accumulating.train_on_batch(b[2]), doctest::Contains("layers.1.kernel"), tf::non_finite_error);
  CHECK(accumulating.iterations() == 1);
  CHECK(std::memcmp(before.data(), accumulating.parameter_region().data(), before.size() * sizeof(float)) == 0);
  // The poisoned micro-batch added nothing to the accumulator: two clean ones make a finite update.
  accumulating.train_on_batch(b[0]);
  accumulating.train_on_batch(b[1]);
  CHECK(accumulating.iterations() == 2);
  CHECK(all_finite(accumulating.parameter_region()));

  tf::model<net> custom{6};
  custom.compile(plain_descent{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  custom.train_on_batch(b[0]);
  const std::vector<float> kept(custom.parameter_region().begin(), custom.parameter_region().end());
  CHECK_THROWS_WITH_AS(custom.train_on_batch(b[2]), doctest::Contains("layers.1.kernel"), tf::non_finite_error);
  CHECK(std::memcmp(kept.data(), custom.parameter_region().data(), kept.size() * sizeof(float)) == 0);
}

TEST_CASE("a sparse label below 0 or not below classes is refused before the step: train_on_batch, fit and evaluate") {
  // Before: class 7 of 3 and -1 trained silently; 1000000000 wrote outside the gradient's row.
  for (const std::int32_t bad : {3, 7, -1, 1000000000, std::numeric_limits<std::int32_t>::min()}) {
    CAPTURE(bad);
    tf::model<net> m{4};
    compile(m);
    auto cursor = dataset(false).open(0);
    decltype(dataset(false))::element_type b;
    REQUIRE(cursor.next(b));
    b.labels[5] = bad;
    const std::vector<float> before(m.parameter_region().begin(), m.parameter_region().end());
    const std::string expected = "label 5 of the batch is " + std::to_string(bad);
    CHECK_THROWS_WITH_AS(m.train_on_batch(b), doctest::Contains(expected.c_str()), std::invalid_argument);
    CHECK(m.iterations() == 0);
    CHECK(std::memcmp(before.data(), m.parameter_region().data(), before.size() * sizeof(float)) == 0);
  }
  std::vector<float> x(batch * 8, 0.5f);
  std::vector<std::int32_t> y(batch, 1);
  y[9] = 3;
  tf::model<net> m{4};
  compile(m);
  const auto bad_data = [&] { return tf::data::from_tensor_slices<tf::shape<8>>(x, y) | tf::data::batch<batch>; };
  CHECK_THROWS_WITH_AS(m.fit(bad_data(), {.epochs = 1, .verbose = 0}), doctest::Contains("label 9 of the batch is 3"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(m.evaluate(bad_data()), doctest::Contains("class ids in [0, 3)"), std::invalid_argument);
}

TEST_CASE("one feature of 1e30 under float32 Adam: fit stops before the update, and the weights are the last good step's") {
  // Before: the gradient (about 1e30) was finite, so the checks passed, and
  // Adam's square of it overflowed inside the update: weights of NaN and inf.
  std::vector<float> x(batch * batches * 8);
  std::vector<std::int32_t> y(batch * batches);
  const tf::random_stream rng{5, 1};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 2.f * rng.uniform(i) - 1.f;
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int32_t>(i % 3);
  x[(2 * batch + 5) * 8 + 3] = 1e30f;  // batch 3
  tf::model<net> m{3}, clean{3};
  compile(m);
  compile(clean);
  try {
    m.fit(tf::data::from_tensor_slices<tf::shape<8>>(x, y) | tf::data::batch<batch>, {.epochs = 1, .verbose = 0});
    FAIL("fit updated with a gradient whose square overflows");
  } catch (const tf::non_finite_error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find("fit: epoch 1, batch 3 (update 3): the gradient of layers.1.kernel is too large to update with") == 0);
  }
  CHECK(all_finite(m.parameter_region()));
  CHECK(m.iterations() == 2);
  auto cursor = (tf::data::from_tensor_slices<tf::shape<8>>(x, y) | tf::data::batch<batch>).open(0);
  decltype(dataset(false))::element_type b;
  for (int i = 0; i < 2; ++i) {
    REQUIRE(cursor.next(b));
    clean.train_on_batch(b);
  }
  const auto p = m.parameter_region(), c = clean.parameter_region();
  CHECK(std::memcmp(p.data(), c.data(), p.size_bytes()) == 0);
}

TEST_CASE("evaluate on a dataset that gives no samples is refused, not reported as loss 0") {
  tf::model<net> m{4};
  compile(m);
  const std::vector<float> x;
  const std::vector<std::int32_t> y;
  CHECK_THROWS_WITH_AS(m.evaluate(tf::data::from_tensor_slices<tf::shape<8>>(x, y) | tf::data::batch<batch>),
                       doctest::Contains("the dataset gave no samples"), std::invalid_argument);
}

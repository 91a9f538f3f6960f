// The NaN policy on tf::cuda (train/non_finite.hpp; the device's test is
// optimizers::device::updatable_bits): a gradient that is NaN, infinite or
// above 2^60 makes the device refuse the update, and fit stops at its batch
// naming the first tensor, with the weights those of the last good step:
// the same as a clean model's after the batches before it, to the bit.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <typeflow/cuda.hpp>

namespace {

namespace tf = typeflow;

using net = tf::sequential<tf::input<8>, tf::dense<16>, tf::relu, tf::dense<3>>;
constexpr int batch = 16, batches = 4;

// Four batches of 16; batch 3 (1-based) holds one feature `bad`.
auto dataset(float bad) {
  std::vector<float> x(batch * batches * 8);
  std::vector<std::int32_t> y(batch * batches);
  const tf::random_stream rng{5, 1};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 2.f * rng.uniform(i) - 1.f;
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int32_t>(i % 3);
  x[(2 * batch + 5) * 8 + 3] = bad;
  return tf::data::from_tensor_slices<tf::shape<8>>(std::move(x), std::move(y)) | tf::data::batch<batch>;
}

using model_type = tf::model<net, tf::float32, tf::single_device, tf::cuda>;

void compile(model_type& m) {
  m.compile(tf::optimizers::adam{.learning_rate = 0.01}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
}

void check_stops_at_batch_3(float bad, const std::string& says) {
  CAPTURE(bad);
  model_type m{3}, clean{3};
  compile(m);
  compile(clean);
  try {
    m.fit(dataset(bad), {.epochs = 1, .verbose = 0});
    FAIL("fit updated with a gradient the NaN policy refuses");
  } catch (const tf::non_finite_error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find("fit: epoch 1, batch 3 (update 3): ") == 0);
    CHECK(message.find(says) != std::string::npos);
  }
  CHECK(m.iterations() == 2);
  auto cursor = dataset(0.f).open(0);
  decltype(dataset(0.f))::element_type b;
  for (int i = 0; i < 2; ++i) {
    REQUIRE(cursor.next(b));
    clean.train_on_batch(b);
  }
  const auto p = m.parameter_region(), c = clean.parameter_region();
  REQUIRE(p.size() == c.size());
  CHECK(std::memcmp(p.data(), c.data(), p.size_bytes()) == 0);
}

}  // namespace

TEST_CASE("cuda NaN policy: a NaN feature, and one of 1e30, stop fit at their batch with the last good weights") {
  // (Whether cuBLASLt's relu epilogue maps the NaN to 0, leaving the loss
  // finite, or passes it on, the message says what is not finite.)
  check_stops_at_batch_3(std::numeric_limits<float>::quiet_NaN(), "is not finite");
  check_stops_at_batch_3(1e30f, "the gradient of layers.1.kernel is too large to update with");
}

TEST_CASE("cuda NaN policy: a loss that overflows while its gradients stay updatable refuses its update, as on the CPU") {
  // mean_squared_error against a target of 2e19: the square overflows to
  // inf, while each gradient, 2 (y - t) / (16 x 3) ~ 8e17, is below 2^60.
  using linear = tf::sequential<tf::input<8>, tf::dense<3>>;
  const auto regression = [](float target) {
    std::vector<float> x(batch * batches * 8), y(batch * batches * 3, 0.5f);
    const tf::random_stream rng{5, 2};
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 2.f * rng.uniform(i) - 1.f;
    y[(2 * batch + 5) * 3 + 1] = target;
    return tf::data::from_tensor_slices<tf::shape<8>, tf::shape<3>>(std::move(x), std::move(y)) | tf::data::batch<batch>;
  };
  tf::model<linear, tf::float32, tf::single_device, tf::cuda> m{4}, clean{4};
  for (auto* model : {&m, &clean}) model->compile(tf::optimizers::adam{.learning_rate = 0.01}, tf::losses::mean_squared_error{});
  try {
    m.fit(regression(2e19f), {.epochs = 1, .verbose = 0});
    FAIL("fit went on past a loss that is not finite");
  } catch (const tf::non_finite_error& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("fit: epoch 1, batch 3 (update 3): the loss is not finite") == 0);
    CHECK(e.tensor() == "loss");
  }
  CHECK(m.iterations() == 2);
  auto cursor = regression(0.5f).open(0);
  decltype(regression(0.5f))::element_type b;
  for (int k = 0; k < 2; ++k) {
    REQUIRE(cursor.next(b));
    clean.train_on_batch(b);
  }
  const auto p = m.parameter_region(), c = clean.parameter_region();
  REQUIRE(p.size() == c.size());
  CHECK(std::memcmp(p.data(), c.data(), p.size_bytes()) == 0);  // the update of batch 3 was refused on the device
}

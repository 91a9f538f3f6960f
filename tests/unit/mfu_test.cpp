// MFU (model FLOPs utilisation) in fit's logs and History: the step's
// compile-time training FLOPs over its measured time and the machine's
// peak, measured once by an FMA probe or given by the user.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>

#include <typeflow/typeflow.hpp>

#include "../support/toy_classifier.hpp"

namespace tf = typeflow;
namespace tf_testing = typeflow::testing;

namespace {

using tf_testing::toy_net;

tf::history fit_toy(double peak_flops, int epochs = 2) {
  tf_testing::toy_data toy(256);
  auto train = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::batch<32>;
  tf::model<toy_net> model{2};
  model.compile(tf::optimizers::sgd{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  return model.fit(train, {.epochs = epochs, .verbose = 0, .peak_flops = peak_flops});
}

}  // namespace

TEST_CASE("the training FLOPs of a step are three forward passes of the batch") {
  // dense<16> on 8 features and dense<4> on 16: at least their multiply-adds, two FLOPs each.
  static_assert(toy_net::flops_per_sample >= 2 * (8 * 16 + 16 * 4));
  CHECK(tf::training_flops_per_step<toy_net, 32> == 3.0 * toy_net::flops_per_sample * 32);
}

TEST_CASE("the FMA probe measures a plausible peak once per process") {
  const double peak = tf::cpu_peak_flops();
  MESSAGE("CPU peak by the FMA probe: " << peak / 1e9 << " GFLOP/s on " << omp_get_max_threads() << " threads");
  CHECK(peak > 1e8);   // any CPU of this century
  CHECK(peak < 1e14);  // no CPU of this decade
  CHECK(tf::cpu_peak_flops() == peak);  // measured once
  const double again = tf::measure_cpu_peak_flops(100'000);
  CHECK(again > 0);
}

TEST_CASE("fit logs mfu against the measured peak, and History records it each epoch") {
  const auto history = fit_toy(0);
  REQUIRE(history.contains("mfu"));
  REQUIRE(history["mfu"].size() == 2);
  for (double mfu : history["mfu"]) {
    CHECK(mfu > 0);
    CHECK(mfu < 2);  // a step cannot run much faster than the probe's peak
  }
}

TEST_CASE("fit's mfu scales with the peak the user gives, and a negative peak leaves it out") {
  const auto history = fit_toy(1.0, 1);  // 1 FLOP/s: mfu is the achieved FLOP/s itself
  const double achieved = history["mfu"].back();
  MESSAGE("toy_net trains at " << achieved / 1e9 << " GFLOP/s");
  CHECK(achieved > 1e5);
  CHECK(achieved < 2 * tf::cpu_peak_flops());
  CHECK_FALSE(fit_toy(-1, 1).contains("mfu"));
  CHECK_THROWS_WITH_AS(fit_toy(NAN, 1), doctest::Contains("peak_flops"), std::invalid_argument);
}

// Precision policies and the loss-scale state machine (Keras 3's LossScaleOptimizer rules).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include <typeflow/precision/loss_scale.hpp>
#include <typeflow/precision/policy.hpp>

namespace tf = typeflow;
using tf::precision::loss_scale;

TEST_CASE("policies name their dtypes, and only float16 compute scales the loss") {
  static_assert(std::is_same_v<tf::mixed_bfloat16::compute_type, tf::bfloat16>);
  static_assert(std::is_same_v<tf::mixed_float16::param_type, tf::float32>);
  static_assert(tf::mixed_float16::loss_scaling);
  static_assert(!tf::mixed_bfloat16::loss_scaling);
  static_assert(!tf::float32_policy::loss_scaling);
  static_assert(tf::is_policy_v<tf::policy<tf::float32, tf::bfloat16, tf::float32>>);
  static_assert(!tf::is_policy_v<tf::float32>);
}

TEST_CASE("dynamic loss scale: 2^15 at first, halved on a non-finite step, doubled after growth_steps finite ones") {
  loss_scale scale(tf::precision::dynamic_loss_scale{});
  CHECK(scale.scale() == 32768.f);
  CHECK_FALSE(scale.after_step(false));  // skipped
  CHECK(scale.scale() == 16384.f);
  CHECK(scale.skipped_steps() == 1);
  for (int i = 0; i < 1999; ++i) REQUIRE(scale.after_step(true));
  CHECK(scale.scale() == 16384.f);  // one short of 2000
  CHECK(scale.after_step(true));
  CHECK(scale.scale() == 32768.f);
  // A non-finite step restarts the count.
  for (int i = 0; i < 1500; ++i) scale.after_step(true);
  CHECK_FALSE(scale.after_step(false));
  CHECK(scale.scale() == 16384.f);
  for (int i = 0; i < 1999; ++i) scale.after_step(true);
  CHECK(scale.scale() == 16384.f);
  scale.after_step(true);
  CHECK(scale.scale() == 32768.f);
  CHECK(scale.skipped_steps() == 2);
}

TEST_CASE("a fixed loss scale never moves but still skips non-finite steps") {
  loss_scale scale(tf::precision::fixed_loss_scale{128.f});
  for (int i = 0; i < 5000; ++i) scale.after_step(true);
  CHECK(scale.scale() == 128.f);
  CHECK_FALSE(scale.after_step(false));
  CHECK(scale.scale() == 128.f);
  CHECK(scale.skipped_steps() == 1);
}

TEST_CASE("loss scales refuse nonsense with the parameter's name") {
  CHECK_THROWS_WITH_AS(loss_scale(tf::precision::dynamic_loss_scale{.initial_scale = 0.f}),
                       doctest::Contains("initial_scale"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(loss_scale(tf::precision::dynamic_loss_scale{.growth_steps = 0}),
                       doctest::Contains("growth_steps"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(loss_scale(tf::precision::fixed_loss_scale{-1.f}), doctest::Contains("scale"),
                       std::invalid_argument);
}

TEST_CASE("all_finite finds an inf or a NaN anywhere, and unscale divides by the scale") {
  std::vector<float> g(1001, 0.5f);
  CHECK(tf::precision::all_finite(g.data(), g.size()));
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()})
    for (std::size_t at : {std::size_t{0}, std::size_t{517}, std::size_t{1000}}) {
      auto copy = g;
      copy[at] = bad;
      CHECK_FALSE(tf::precision::all_finite(copy.data(), copy.size()));
    }
  g[3] = std::numeric_limits<float>::max();  // large but finite
  CHECK(tf::precision::all_finite(g.data(), g.size()));
  tf::precision::unscale(g.data(), g.size(), 4.f);
  CHECK(g[0] == 0.125f);
}

TEST_CASE("unscale_all_finite unscales and finds an inf or a NaN in the same pass") {
  std::vector<float> g(1001, 0.5f);
  g[3] = std::numeric_limits<float>::max();
  CHECK(tf::precision::unscale_all_finite(g.data(), g.size(), 4.f));
  CHECK(g[0] == 0.125f);
  CHECK(g[3] == std::numeric_limits<float>::max() / 4.f);
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    for (std::size_t at : {std::size_t{0}, std::size_t{517}, std::size_t{1000}}) {
      std::vector<float> copy(1001, 0.5f);
      copy[at] = bad;
      CHECK_FALSE(tf::precision::unscale_all_finite(copy.data(), copy.size(), 2.f));
    }
}

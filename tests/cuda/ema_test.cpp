// Keras 3's optimizer EMA on tf::cuda (use_ema, ema_momentum,
// ema_overwrite_frequency): the moving average kept on the device after each
// applied update, against the same model on the CPU; fit ends with the
// average in the weights, and swap_ema_weights exchanges them through the
// host copies and back.
#include <doctest/doctest.h>

#include <cstring>
#include <optional>
#include <vector>

#include <typeflow/cuda.hpp>

#include "model_reference.hpp"

namespace {

using namespace cuda_reference;

auto toy_dataset() {
  const toy_data d = make_data();
  return tf::data::from_tensor_slices<tf::shape<32>>(d.features, d.labels) | tf::data::batch<batch>;
}

template <class Model>
void compile_with_ema(Model& m, std::optional<int> overwrite) {
  m.compile(tf::optimizers::adam{.learning_rate = 0.01f, .use_ema = true, .ema_momentum = 0.9f,
                                 .ema_overwrite_frequency = overwrite},
            tf::losses::sparse_categorical_crossentropy{.from_logits = true});
}

struct ema_run {
  std::vector<double> losses;
  std::vector<float> finalized, after_swap;
};

// Two epochs (fit ends with the average in the weights), one more batch,
// then the weights as swap_ema_weights leaves them.
template <class Device>
ema_run run_with_ema(std::optional<int> overwrite) {
  tf::model<mlp, tf::float32, tf::single_device, Device> m(seed);
  compile_with_ema(m, overwrite);
  ema_run out;
  out.losses = m.fit(toy_dataset(), {.epochs = 2, .verbose = 0})["loss"];
  const auto finalized = m.parameter_region();
  out.finalized.assign(finalized.begin(), finalized.end());
  auto cursor = toy_dataset().open(0);
  typename decltype(toy_dataset())::element_type b;
  REQUIRE(cursor.next(b));
  m.train_on_batch(b);
  m.swap_ema_weights();
  const auto swapped = m.parameter_region();
  out.after_swap.assign(swapped.begin(), swapped.end());
  return out;
}

}  // namespace

TEST_CASE("cuda model: use_ema keeps the CPU's moving average, with and without overwrites") {
  for (std::optional<int> overwrite : {std::optional<int>{}, std::optional<int>{3}}) {
    CAPTURE(overwrite.value_or(0));
    const ema_run cpu = run_with_ema<tf::cpu>(overwrite);
    const ema_run gpu = run_with_ema<tf::cuda>(overwrite);
    for (std::size_t e = 0; e < cpu.losses.size(); ++e) CHECK(gpu.losses[e] == doctest::Approx(cpu.losses[e]).epsilon(2e-3));
    for (std::vector<float> ema_run::*which : {&ema_run::finalized, &ema_run::after_swap}) {
      const region_distance gap = distance_between(gpu.*which, cpu.*which);
      INFO("largest weight difference " << gap.worst << " of weights up to " << gap.largest);
      CHECK(gap.worst < 1e-2 * gap.largest);
    }
  }
}

TEST_CASE("cuda model: swap_ema_weights exchanges the weights and the average, and a second swap restores them") {
  tf::model<mlp, tf::float32, tf::single_device, tf::cuda> m(seed);
  compile_with_ema(m, std::nullopt);
  m.fit(toy_dataset(), {.epochs = 1, .verbose = 0});
  auto cursor = toy_dataset().open(0);
  typename decltype(toy_dataset())::element_type b;
  REQUIRE(cursor.next(b));
  m.train_on_batch(b);  // the weights move away from the average
  const auto region = m.parameter_region();
  const std::vector<float> weights(region.begin(), region.end());
  m.swap_ema_weights();
  CHECK(m.ema_weights_in_model());
  const auto swapped = m.parameter_region();
  CHECK(std::memcmp(swapped.data(), weights.data(), weights.size() * sizeof(float)) != 0);
  (void)m.evaluate(toy_dataset());  // runs on the device with the average
  m.swap_ema_weights();
  CHECK_FALSE(m.ema_weights_in_model());
  const auto back = m.parameter_region();
  REQUIRE(back.size() == weights.size());
  CHECK(std::memcmp(back.data(), weights.data(), weights.size() * sizeof(float)) == 0);
}

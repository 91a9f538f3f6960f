// model<Net, mixed_bfloat16 / mixed_float16, single_device, cuda> against the
// same model type on the CPU (mixed_reference.cpp). Not bit for bit: the
// GPU's products sum in another order, so a value near a 16-bit rounding
// boundary can round the other way, and the GPU writes dW, db and dX in
// float32 where the CPU rounds them to 16 bits (backend/cuda/layers.hpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include <typeflow/cuda.hpp>

#include "mixed_reference.hpp"

namespace {
using namespace cuda_mixed_reference;

auto toy_dataset(const toy_data& d) {
  return tf::data::from_tensor_slices<tf::shape<32>>(d.features, d.labels) | tf::data::batch<batch>;
}

// How far the GPU may drift from the CPU over 3 epochs (30 Adam steps),
// calibrated on the CPU with this mlp. Scaling a third of the initial
// weights by 1 + 1e-4 (rounding flips of the kind a different summation
// order causes) moved the final losses by up to 0.17% (bfloat16) / 0.01%
// (float16), the largest weight difference to 5.8% / 1.2% of the largest
// weight, the RMS difference to 1.0% / 0.24% of the weights' RMS, and the
// accuracy by one sample; rounding no gradient at all (each policy against
// float32) moved them as much. The bounds are 2.5x those or more; a wrong
// operand, bias or scale moves the loss by far more.
struct tolerance {
  double loss;      // relative, per epoch
  double accuracy;  // absolute, per epoch (one sample of 160 is 0.00625)
  double worst;     // largest |difference| / largest |weight|
  double rms;       // RMS difference / RMS weight
};

template <class Policy>
void check_against_cpu(const run_result& cpu, tolerance tol) {
  constexpr int epochs = 3;
  REQUIRE(cpu.losses.size() == static_cast<std::size_t>(epochs));
  // The comparison needs the same steps: no step skipped on the CPU.
  REQUIRE(cpu.skipped_steps == 0);
  const toy_data d = make_data();
  tf::model<mlp, Policy, tf::single_device, tf::cuda> gpu(seed);
  gpu.compile(tf::optimizers::adam{.learning_rate = 0.01f},
              tf::losses::sparse_categorical_crossentropy{.from_logits = true},
              tf::metrics::sparse_categorical_accuracy{});
  const auto history = gpu.fit(toy_dataset(d), {.epochs = epochs, .verbose = 0});
  const auto& losses = history["loss"];
  REQUIRE(losses.size() == static_cast<std::size_t>(epochs));
  for (int e = 0; e < epochs; ++e) {
    INFO("epoch " << e + 1 << ": gpu " << losses[e] << ", cpu " << cpu.losses[e]);
    CHECK(std::isfinite(losses[e]));
    CHECK(losses[e] == doctest::Approx(cpu.losses[e]).epsilon(tol.loss));
    CHECK(std::fabs(history["sparse_categorical_accuracy"][e] - cpu.accuracies[e]) <= tol.accuracy);
  }
  CHECK(losses.back() < losses.front());  // it learns
  CHECK(gpu.iterations() == cpu.iterations);
  CHECK(gpu.skipped_steps() == 0);
  CHECK(gpu.loss_scale() == cpu.loss_scale);  // 2^15 under mixed_float16 (no growth in 30 steps), else 1
  const auto region = gpu.parameter_region();
  REQUIRE(region.size() == cpu.parameters.size());
  double worst = 0, largest = 0, squared_difference = 0, squared_weight = 0;
  for (std::size_t i = 0; i < region.size(); ++i) {
    const double difference = std::fabs(double{region[i]} - cpu.parameters[i]);
    worst = std::max(worst, difference);
    largest = std::max(largest, std::fabs(double{cpu.parameters[i]}));
    squared_difference += difference * difference;
    squared_weight += double{cpu.parameters[i]} * cpu.parameters[i];
  }
  const double rms = std::sqrt(squared_difference / squared_weight);
  INFO("largest weight difference " << worst << " of weights up to " << largest << "; RMS ratio " << rms);
  CHECK(std::isfinite(worst));
  CHECK(worst < tol.worst * largest);
  CHECK(rms < tol.rms);
}

}  // namespace

TEST_CASE("cuda model under mixed_bfloat16 trains like the CPU model (16-bit dense, relu, dropout, tanh, gelu, fused gelu_tanh)") {
  check_against_cpu<tf::mixed_bfloat16>(train_bfloat16_on_cpu(3), {.loss = 5e-3, .accuracy = 0.03, .worst = 0.15, .rms = 0.03});
}

TEST_CASE("cuda model under mixed_float16 trains like the CPU model, with the same loss scale") {
  check_against_cpu<tf::mixed_float16>(train_float16_on_cpu(3), {.loss = 1e-3, .accuracy = 0.03, .worst = 0.04, .rms = 0.008});
}

TEST_CASE("cuda model under mixed_float16: an overflowing step is skipped, the weights stay, the scale halves") {
  constexpr int steps = 5;
  const overflow_trace cpu = overflow_on_cpu(steps);
  tf::model<overflow_net, tf::mixed_float16, tf::single_device, tf::cuda> gpu{1};
  gpu.compile(tf::optimizers::sgd{.learning_rate = 0.1f},
              tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  set_overflow_weights(gpu);
  const std::vector<float> before(gpu.parameter_region().begin(), gpu.parameter_region().end());
  REQUIRE(before == cpu.parameters_before);
  CHECK(gpu.loss_scale() == 32768.f);
  const overflow_batch b = make_overflow_batch();
  gpu.train_on_batch(b);
  CHECK(gpu.skipped_steps() == 1);
  CHECK(gpu.loss_scale() == 16384.f);
  CHECK(gpu.iterations() == 0);
  const std::vector<float> after_skip(gpu.parameter_region().begin(), gpu.parameter_region().end());
  CHECK(after_skip == before);
  // Then as on the CPU: skipped at 2^14 and 2^13, applied at 2^12.
  std::vector<std::int64_t> skipped{gpu.skipped_steps()}, iterations{gpu.iterations()};
  std::vector<float> scales{gpu.loss_scale()};
  for (int i = 1; i < steps; ++i) {
    gpu.train_on_batch(b);
    skipped.push_back(gpu.skipped_steps());
    iterations.push_back(gpu.iterations());
    scales.push_back(gpu.loss_scale());
  }
  CHECK(skipped == cpu.skipped_steps);
  CHECK(iterations == cpu.iterations);
  CHECK(scales == cpu.loss_scales);
  CHECK(skipped.back() == 3);
  CHECK(scales.back() == 4096.f);
  // The two applied steps: the first one's gradients are exact in float16
  // (8 s, 0.5 s), the second's underflow (the logits are then about +-39),
  // so the updates agree up to the optimizer's last bit.
  const auto after = gpu.parameter_region();
  REQUIRE(after.size() == cpu.parameters_after.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    INFO("parameter " << i << ": gpu " << after[i] << ", cpu " << cpu.parameters_after[i]);
    CHECK(std::fabs(double{after[i]} - cpu.parameters_after[i]) <= 1e-4 * (1 + std::fabs(cpu.parameters_after[i])));
  }
}

// Kernel and bias regularizers on tf::cuda: the penalty's gradient added on
// the device (regularizers/regularizers.hpp's per-weight functions, which
// the CPU runs too) and the penalty reported as on the CPU, in float32 and
// under mixed_float16's loss scaling (the gradients are still scaled when
// the penalties' are added).
#include <doctest/doctest.h>

#include <vector>

#include <typeflow/cuda.hpp>

#include "model_reference.hpp"

namespace {

using namespace cuda_reference;
namespace reg = tf::regularizers;

using regularized_net =
    tf::sequential<tf::input<32>, tf::dense<64, tf::kernel_regularizer<reg::l1_l2<1e-4f, 1e-3f>>>, tf::relu,
                   tf::dense<48, tf::bias_regularizer<reg::l2<1e-2f>>>, tf::tanh,
                   tf::dense<10, tf::float32, tf::kernel_regularizer<reg::l1<1e-3f>>>>;

struct run {
  std::vector<double> loss, penalty;
  double evaluated_loss = 0, evaluated_penalty = 0;
  std::vector<float> weights;
};

template <class Policy, class Device>
run train_regularized() {
  const toy_data d = make_data();
  auto data = tf::data::from_tensor_slices<tf::shape<32>>(d.features, d.labels) | tf::data::batch<batch>;
  tf::model<regularized_net, Policy, tf::single_device, Device> m(seed);
  m.compile(tf::optimizers::adam{.learning_rate = 0.01f},
            tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const auto history = m.fit(data, {.epochs = 3, .verbose = 0});
  run out;
  out.loss = history["loss"];
  out.penalty = history["regularization_loss"];
  const auto evaluated = m.evaluate(data);
  out.evaluated_loss = evaluated.at("loss");
  out.evaluated_penalty = evaluated.at("regularization_loss");
  const auto region = m.parameter_region();
  out.weights.assign(region.begin(), region.end());
  return out;
}

template <class Policy>
void check_regularized(double tolerance) {
  const run cpu = train_regularized<Policy, tf::cpu>();
  const run gpu = train_regularized<Policy, tf::cuda>();
  REQUIRE(gpu.loss.size() == cpu.loss.size());
  REQUIRE(gpu.penalty.size() == cpu.penalty.size());
  for (std::size_t e = 0; e < cpu.loss.size(); ++e) {
    INFO("epoch " << e + 1 << ": loss gpu " << gpu.loss[e] << ", cpu " << cpu.loss[e] << "; penalty gpu "
                  << gpu.penalty[e] << ", cpu " << cpu.penalty[e]);
    CHECK(gpu.loss[e] == doctest::Approx(cpu.loss[e]).epsilon(tolerance));
    CHECK(gpu.penalty[e] == doctest::Approx(cpu.penalty[e]).epsilon(tolerance));
    CHECK(gpu.penalty[e] > 0);
  }
  CHECK(gpu.evaluated_loss == doctest::Approx(cpu.evaluated_loss).epsilon(tolerance));
  CHECK(gpu.evaluated_penalty == doctest::Approx(cpu.evaluated_penalty).epsilon(tolerance));
  const region_distance gap = distance_between(gpu.weights, cpu.weights);
  INFO("largest weight difference " << gap.worst << " of weights up to " << gap.largest);
  CHECK(gap.worst < 10 * tolerance * gap.largest);
}

}  // namespace

TEST_CASE("cuda model: regularizers' penalties and gradients as on the CPU (float32)") { check_regularized<tf::float32>(2e-3); }

TEST_CASE("cuda model: regularizers under mixed_float16's loss scaling as on the CPU") {
  check_regularized<tf::mixed_float16>(2e-2);
}

// accumulate<K>(optimizer) on tf::cuda: the accumulator kept on the device,
// the update once every K micro-batches on their mean (clipped as the CPU
// clips it), against the same model on the CPU; and iterations() counting
// updates, not micro-batches.
#include <doctest/doctest.h>

#include <vector>

#include <typeflow/cuda.hpp>

#include "model_reference.hpp"

namespace {

using namespace cuda_reference;
// mlp with its logits in float32, as a mixed policy needs.
using net = tf::sequential<tf::input<32>, tf::dense<64>, tf::relu, tf::dropout<0.25f>, tf::layer_norm, tf::dense<48>,
                           tf::tanh, tf::dense<10, tf::float32>>;

struct accumulated_run {
  std::vector<double> losses;
  std::vector<float> weights;
  std::int64_t iterations = 0;
};

template <class Policy, class Device>
accumulated_run train_accumulated() {
  const toy_data d = make_data();
  auto data = tf::data::from_tensor_slices<tf::shape<32>>(d.features, d.labels) | tf::data::batch<batch>;
  tf::model<net, Policy, tf::single_device, Device> m(seed);
  m.compile(tf::optimizers::accumulate<4>(tf::optimizers::adamw{.learning_rate = 0.01f, .global_clipnorm = 1.f}),
            tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  accumulated_run out;
  out.losses = m.fit(data, {.epochs = 2, .verbose = 0})["loss"];
  const auto region = m.parameter_region();
  out.weights.assign(region.begin(), region.end());
  out.iterations = m.iterations();
  return out;
}

template <class Policy>
void check_accumulated(double tolerance) {
  const accumulated_run cpu = train_accumulated<Policy, tf::cpu>();
  const accumulated_run gpu = train_accumulated<Policy, tf::cuda>();
  // 10 micro-batches an epoch, 20 in all: 5 updates of 4.
  CHECK(cpu.iterations == 5);
  CHECK(gpu.iterations == cpu.iterations);
  for (std::size_t e = 0; e < cpu.losses.size(); ++e) {
    INFO("epoch " << e + 1 << ": gpu " << gpu.losses[e] << ", cpu " << cpu.losses[e]);
    CHECK(gpu.losses[e] == doctest::Approx(cpu.losses[e]).epsilon(tolerance));
  }
  const region_distance gap = distance_between(gpu.weights, cpu.weights);
  INFO("largest weight difference " << gap.worst << " of weights up to " << gap.largest);
  CHECK(gap.worst < 10 * tolerance * gap.largest);
}

}  // namespace

TEST_CASE("cuda model: accumulate<4> updates on the mean of four micro-batches, as the CPU (float32)") {
  check_accumulated<tf::float32>(2e-3);
}

TEST_CASE("cuda model: accumulate<4> under mixed_float16's loss scaling, as the CPU") {
  check_accumulated<tf::mixed_float16>(2e-2);
}

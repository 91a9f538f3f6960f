// A functional graph (merges, a shared layer, in-place layers) trained on the
// GPU against the same model on the CPU: the merge layers' kernels, the
// graph's gradient buffers and the shared layer's summed gradient on CUDA;
// and a graph with two named inputs (their unpacking kernels).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include <typeflow/cuda.hpp>

#include "model_reference.hpp"

TEST_CASE("cuda model: a functional graph trains like the same graph on the CPU") {
  using namespace cuda_reference;
  constexpr int epochs = 3;
  const run_result cpu = train_graph_on_cpu(epochs);
  const toy_data d = make_data();
  tf::model<graph_net, tf::float32, tf::single_device, tf::cuda> gpu(seed);
  gpu.compile(tf::optimizers::adam{.learning_rate = 0.01f},
              tf::losses::sparse_categorical_crossentropy{.from_logits = true},
              tf::metrics::sparse_categorical_accuracy{});
  const auto history =
      gpu.fit(tf::data::from_tensor_slices<tf::shape<32>>(d.features, d.labels) | tf::data::batch<batch>,
              {.epochs = epochs, .verbose = 0});
  const auto& losses = history["loss"];
  REQUIRE(losses.size() == static_cast<std::size_t>(epochs));
  for (int e = 0; e < epochs; ++e) {
    INFO("epoch " << e + 1 << ": gpu " << losses[e] << ", cpu " << cpu.losses[e]);
    CHECK(losses[e] == doctest::Approx(cpu.losses[e]).epsilon(2e-3));
  }
  CHECK(losses.back() < losses.front());
  const auto region = gpu.parameter_region();
  REQUIRE(region.size() == cpu.parameters.size());
  const region_distance gap = distance_between(region, cpu.parameters);
  INFO("largest weight difference " << gap.worst << " of weights up to " << gap.largest);
  CHECK(gap.worst < 1e-2 * gap.largest);
}

TEST_CASE("cuda model: a graph with two named inputs and a shared layer trains like on the CPU") {
  using namespace cuda_reference;
  constexpr int epochs = 3;
  const run_result cpu = train_two_inputs_on_cpu(epochs);
  tf::model<two_input_net, tf::float32, tf::single_device, tf::cuda> gpu(seed);
  gpu.compile(tf::optimizers::adam{.learning_rate = 0.01f},
              tf::losses::sparse_categorical_crossentropy{.from_logits = true},
              tf::metrics::sparse_categorical_accuracy{});
  const auto history =
      gpu.fit(tf::data::from_values(halves_of(make_data())) | tf::data::batch<batch>, {.epochs = epochs, .verbose = 0});
  const auto& losses = history["loss"];
  REQUIRE(losses.size() == static_cast<std::size_t>(epochs));
  for (int e = 0; e < epochs; ++e) {
    INFO("epoch " << e + 1 << ": gpu " << losses[e] << ", cpu " << cpu.losses[e]);
    CHECK(losses[e] == doctest::Approx(cpu.losses[e]).epsilon(2e-3));
  }
  const region_distance gap = distance_between(gpu.parameter_region(), cpu.parameters);
  INFO("largest weight difference " << gap.worst << " of weights up to " << gap.largest);
  CHECK(gap.worst < 1e-2 * gap.largest);
}

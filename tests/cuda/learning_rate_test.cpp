// model::set_learning_rate on tf::cuda: the device optimizers read the one
// optimizer compile() keeps (backend/cuda/device_optimizer.hpp), so a new
// rate reaches the next step with nothing copied. Checked against the CPU
// model step for step, and by a rate of 0, after which the weights stay.
#include <doctest/doctest.h>

#include <vector>

#include <typeflow/cuda.hpp>

#include "model_reference.hpp"

namespace {

namespace tf = typeflow;
using namespace cuda_reference;

template <class Device>
std::vector<double> losses_with_rate_changes() {
  const toy_data d = make_data();
  tf::model<mlp, tf::float32, tf::single_device, Device> model(seed);
  model.compile(tf::optimizers::adam{.learning_rate = 0.01f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  auto data = tf::data::from_tensor_slices<tf::shape<32>>(d.features, d.labels) | tf::data::batch<batch>;
  std::vector<double> out = model.fit(data, {.epochs = 1, .verbose = 0})["loss"];
  model.set_learning_rate(0.05);
  for (double l : model.fit(data, {.epochs = 1, .verbose = 0})["loss"]) out.push_back(l);
  model.set_learning_rate(0.0);
  for (int i = 0; i < 2; ++i) out.push_back(model.evaluate(data).at("loss"));
  model.fit(data, {.epochs = 1, .verbose = 0});  // at rate 0 (dropout's draws change nothing in evaluate)
  out.push_back(model.evaluate(data).at("loss"));
  return out;
}

}  // namespace

TEST_CASE("cuda model: set_learning_rate reaches the GPU's next step, as on the CPU") {
  const auto cpu = losses_with_rate_changes<tf::cpu>();
  const auto gpu = losses_with_rate_changes<tf::cuda>();
  REQUIRE(gpu.size() == cpu.size());
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    INFO("value " << i << ": gpu " << gpu[i] << ", cpu " << cpu[i]);
    CHECK(gpu[i] == doctest::Approx(cpu[i]).epsilon(2e-3));
  }
  CHECK(gpu[4] == gpu[2]);  // an epoch at rate 0 left the weights as they were
}

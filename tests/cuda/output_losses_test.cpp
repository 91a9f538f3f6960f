// A loss per output on tf::cuda (train/cuda_output_losses.hpp): a functional
// network with two outputs, a sparse cross-entropy on one and a mean squared
// error on the other, each weighted, trains on the GPU as on the CPU (the
// total loss, each output's own and the weights), under compile's on_output
// and with one loss given to both outputs; a last partial batch included.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <typeflow/cuda.hpp>
#include <typeflow/typeflow.hpp>

#include "compare_losses.hpp"

namespace {

namespace tf = typeflow;
namespace data = typeflow::data;

using two_outputs = tf::functional<tf::node<"image", tf::input<8>>,                     //
                                   tf::node<"h", tf::dense<16>, "image">,                //
                                   tf::node<"hr", tf::tanh, "h">,                        //
                                   tf::node<"class", tf::dense<5>, "hr">,                //
                                   tf::node<"value", tf::dense<2>, "hr">,                //
                                   tf::outputs<"class", "value">>;
using features = data::record<data::part<"image", data::tensor_value<float, tf::shape<8>>>>;
using labels = data::record<data::part<"class", data::tensor_value<std::int32_t, tf::shape<>>>,
                            data::part<"value", data::tensor_value<float, tf::shape<2>>>>;
using dense_labels = data::record<data::part<"class", data::tensor_value<float, tf::shape<5>>>,
                                  data::part<"value", data::tensor_value<float, tf::shape<2>>>>;

// 150 samples: 18 batches of 8 and a partial one of 6.
constexpr int samples = 150;

std::vector<data::example<features, labels>> sparse_samples() {
  const tf::random_stream rng{5, 9};
  std::vector<data::example<features, labels>> out(samples);
  for (int i = 0; i < samples; ++i) {
    auto& e = out[static_cast<std::size_t>(i)];
    auto& image = e.features.template get<"image">();
    for (std::size_t j = 0; j < 8; ++j) image[j] = 2.f * rng.uniform(static_cast<std::uint64_t>(i * 8) + j) - 1.f;
    e.label.template get<"class">()[0] = (image[0] > 0 ? 1 : 0) + (image[1] > 0 ? 2 : 0) + (image[5] > 0.5f ? 1 : 0);
    e.label.template get<"value">()[0] = image[2] + image[3];
    e.label.template get<"value">()[1] = 0.5f * image[6] - image[4];
  }
  return out;
}

// The same samples with the class as a one-hot row (for a dense loss on both outputs).
std::vector<data::example<features, dense_labels>> dense_samples() {
  std::vector<data::example<features, dense_labels>> out(samples);
  const auto sparse = sparse_samples();
  for (int i = 0; i < samples; ++i) {
    const auto& from = sparse[static_cast<std::size_t>(i)];
    auto& e = out[static_cast<std::size_t>(i)];
    e.features = from.features;
    for (int c = 0; c < 5; ++c)
      e.label.template get<"class">()[static_cast<std::size_t>(c)] = c == from.label.template get<"class">()[0] ? 1.f : 0.f;
    e.label.template get<"value">() = from.label.template get<"value">();
  }
  return out;
}

struct run {
  std::vector<double> loss, class_loss, value_loss;
  std::vector<float> weights;
};

template <class Device>
run train_weighted() {
  tf::model<two_outputs, tf::float32, tf::single_device, Device> net{11};
  net.compile(tf::optimizers::adam{.learning_rate = 0.01f},
              tf::on_output<"class">(tf::losses::sparse_categorical_crossentropy{.from_logits = true}, 0.7),
              tf::on_output<"value">(tf::losses::mean_squared_error{}, 0.3),
              tf::on_output<"class">(tf::metrics::accuracy{}));
  const auto history = net.fit(data::from_values(sparse_samples()) | data::batch<8>, {.epochs = 3, .verbose = 0});
  const auto region = net.parameter_region();
  return {history["loss"], history["class_loss"], history["value_loss"], {region.begin(), region.end()}};
}

template <class Device>
std::vector<double> train_one_loss() {
  tf::model<two_outputs, tf::float32, tf::single_device, Device> net{11};
  net.compile(tf::optimizers::adam{.learning_rate = 0.01f}, tf::losses::mean_squared_error{});
  auto batches = data::from_values(dense_samples()) | data::batch<8>;
  std::vector<double> losses = net.fit(batches, {.epochs = 3, .verbose = 0})["loss"];
  losses.push_back(net.evaluate(batches).at("loss"));
  return losses;
}

}  // namespace

TEST_CASE("cuda output losses: two outputs with their own weighted losses train as on the CPU") {
  const run gpu = train_weighted<tf::cuda>();
  const run cpu = train_weighted<tf::cpu>();
  cuda_test::check_losses_agree(gpu.loss, cpu.loss, 2e-3, 2);
  cuda_test::check_losses_agree(gpu.class_loss, cpu.class_loss, 2e-3, 2);
  cuda_test::check_losses_agree(gpu.value_loss, cpu.value_loss, 2e-3, 2);
  REQUIRE(gpu.weights.size() == cpu.weights.size());
  float worst = 0.f, largest = 0.f;
  for (std::size_t i = 0; i < cpu.weights.size(); ++i) {
    worst = std::max(worst, std::fabs(gpu.weights[i] - cpu.weights[i]));
    largest = std::max(largest, std::fabs(cpu.weights[i]));
  }
  INFO("largest weight difference " << worst << " of weights up to " << largest);
  CHECK(worst < 1e-2f * largest);
}

TEST_CASE("cuda output losses: one loss given to a network with two outputs trains both, as on the CPU") {
  cuda_test::check_losses_agree(train_one_loss<tf::cuda>(), train_one_loss<tf::cpu>(), 2e-3, 2);
}

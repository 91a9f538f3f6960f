// The losses on tf::cuda (backend/cuda/losses.hpp): the dense-target losses'
// kernel runs each loss's `row` on the device, so its results are the CPU
// loss's to float rounding of the device's log; and models compiled with
// those losses train on the GPU as on the CPU, in one binary (g++ compiles
// both models).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <typeflow/cuda.hpp>

#include "compare_losses.hpp"
#include "device_vectors.hpp"

#include "model_reference.hpp"

namespace {

namespace cu = typeflow::backend::cuda;
namespace tf = typeflow;

using cuda_test::from_device;
using cuda_test::to_device;

// Outputs and targets a loss of this kind takes: logits and soft targets,
// probabilities (positive rows), or regression values.
struct rows_of {
  std::vector<float> out, targets;
};
rows_of make_rows(int rows, int width, bool probabilities, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-3.f, 3.f), weight(0.f, 1.f);
  rows_of r{std::vector<float>(static_cast<std::size_t>(rows) * width),
            std::vector<float>(static_cast<std::size_t>(rows) * width)};
  for (float& x : r.out) x = probabilities ? 0.01f + weight(rng) : value(rng);
  for (float& t : r.targets) t = weight(rng);
  return r;
}

template <class Loss>
void check_against_cpu(const Loss& loss, int rows, int width, int valid, bool probabilities) {
  CAPTURE(rows);
  CAPTURE(width);
  CAPTURE(valid);
  const rows_of in = make_rows(rows, width, probabilities, 17u + static_cast<std::uint32_t>(rows * 7 + width));
  std::vector<float> cpu_gradient(in.out.size()), cpu_loss(static_cast<std::size_t>(rows));
  loss(in.out.data(), in.targets.data(), rows, width, valid, cpu_gradient.data(), cpu_loss.data());

  const auto out = to_device(in.out), targets = to_device(in.targets);
  cu::device_buffer gradient(in.out.size() * sizeof(float)), row_losses(static_cast<std::size_t>(rows) * sizeof(float));
  const auto device_loss = cu::make_device_loss(loss);
  device_loss->record(out.template data<float>(), targets.data(), gradient.template data<float>(),
                      row_losses.template data<float>(), rows, width, width, valid, nullptr);
  TYPEFLOW_CUDA_CHECK(cudaDeviceSynchronize());
  const auto gpu_gradient = from_device(gradient, in.out.size());
  const auto gpu_loss = from_device(row_losses, static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    CAPTURE(r);
    REQUIRE(gpu_loss[r] == doctest::Approx(cpu_loss[r]).epsilon(1e-5));
    if (r >= valid) REQUIRE(gpu_loss[r] == 0.f);
  }
  for (std::size_t i = 0; i < in.out.size(); ++i) {
    CAPTURE(i);
    REQUIRE(gpu_gradient[i] == doctest::Approx(cpu_gradient[i]).epsilon(1e-5).scale(1e-6));
  }
}

}  // namespace

TEST_CASE("cuda losses: categorical_crossentropy and mean_squared_error on the device are the CPU's") {
  for (int width : {1, 3, 10, 257})
    for (int rows : {1, 37})
      for (int valid : {rows, rows - rows / 4}) {
        check_against_cpu(tf::losses::mean_squared_error{}, rows, width, valid, false);
        if (width < 2) continue;
        check_against_cpu(tf::losses::categorical_crossentropy{.from_logits = true}, rows, width, valid, false);
        check_against_cpu(tf::losses::categorical_crossentropy{.from_logits = false}, rows, width, valid, true);
      }
}

namespace {
using namespace cuda_reference;

// make_data()'s samples with dense targets: a one-hot row (categorical) or
// the class id as a number to regress (mean_squared_error, one output).
using one_hot_net = mlp;
using regression_net = tf::sequential<tf::input<32>, tf::dense<64>, tf::relu, tf::layer_norm, tf::dense<48>, tf::tanh,
                                      tf::dense<1>>;

// Three epochs, then evaluate over the same data: the losses.
template <class Net, class Device, class Loss>
std::vector<double> train_dense(const Loss& loss) {
  constexpr int width = Net::output_shape_type::size;  // 10: one-hot classes; 1: the class id / 10
  const toy_data d = make_data();
  std::vector<float> targets;
  for (std::int32_t y : d.labels) {
    if constexpr (width == 10)
      for (int c = 0; c < 10; ++c) targets.push_back(c == y ? 1.f : 0.f);
    else
      targets.push_back(static_cast<float>(y) / 10.f);
  }
  tf::model<Net, tf::float32, tf::single_device, Device> model(seed);
  model.compile(tf::optimizers::adam{.learning_rate = 0.01f}, loss);
  auto data = tf::data::from_tensor_slices<tf::shape<32>, tf::shape<width>>(d.features, targets) | tf::data::batch<batch>;
  std::vector<double> losses = model.fit(data, {.epochs = 3, .verbose = 0})["loss"];
  losses.push_back(model.evaluate(data).at("loss"));
  return losses;
}

template <class Net, class Loss>
void check_trains_like_cpu(const Loss& loss) {
  // three epochs, then evaluate
  cuda_test::check_losses_agree(train_dense<Net, tf::cuda>(loss), train_dense<Net, tf::cpu>(loss), 2e-3, 2);
}
}  // namespace

TEST_CASE("cuda model: categorical_crossentropy on one-hot float labels trains like the CPU model") {
  check_trains_like_cpu<one_hot_net>(tf::losses::categorical_crossentropy{.from_logits = true});
}

TEST_CASE("cuda model: mean_squared_error on a regression target trains like the CPU model") {
  check_trains_like_cpu<regression_net>(tf::losses::mean_squared_error{});
}

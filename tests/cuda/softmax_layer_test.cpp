// The softmax layer on tf::cuda: its backward kernel against the CPU
// layer's formula (core/row_math.hpp's softmax_input_gradient, a sequential
// dot product here), and a model that ends in softmax, trained with the
// cross-entropy from probabilities, against the same model on the CPU.
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

}  // namespace

TEST_CASE("cuda softmax_backward: the CPU layer's gradient, to float rounding of the dot product") {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> dist(-3.f, 3.f);
  for (int classes : {1, 10, 33, 1000, 50257})
    for (int rows : {1, 7, 130}) {
      CAPTURE(classes);
      CAPTURE(rows);
      std::vector<float> z(static_cast<std::size_t>(rows) * classes), g(z.size()), y(z.size());
      for (float& v : z) v = dist(rng);
      for (float& v : g) v = dist(rng);
      for (int r = 0; r < rows; ++r)
        tf::softmax_row(z.data() + static_cast<std::size_t>(r) * classes, y.data() + static_cast<std::size_t>(r) * classes,
                        classes);
      std::vector<float> cpu = g;
      for (int r = 0; r < rows; ++r) {
        const float* yr = y.data() + static_cast<std::size_t>(r) * classes;
        float* gr = cpu.data() + static_cast<std::size_t>(r) * classes;
        double dot = 0;
        for (int j = 0; j < classes; ++j) dot += static_cast<double>(gr[j]) * yr[j];
        for (int j = 0; j < classes; ++j)
          gr[j] = tf::row_math::softmax_input_gradient(yr[j], gr[j], static_cast<float>(dot));
      }
      auto y_d = to_device(y), g_d = to_device(g);
      cu::softmax_backward(reinterpret_cast<const float*>(y_d.data()), reinterpret_cast<float*>(g_d.data()), rows,
                           classes, nullptr);
      const auto gpu = from_device(g_d, g.size());
      double worst = 0;
      for (std::size_t i = 0; i < gpu.size(); ++i)
        worst = std::max(worst, std::fabs(static_cast<double>(gpu[i]) - cpu[i]) / (std::fabs(y[i]) * 3 + 1e-30));
      CHECK(worst < 1e-5);  // |d_out| <= 3: relative to the element's scale y * 3
    }
}

namespace {
using namespace cuda_reference;
// make_data()'s classifier, ending in probabilities.
using probabilities_net = tf::sequential<tf::input<32>, tf::dense<64>, tf::relu, tf::layer_norm, tf::dense<10>,
                                         tf::softmax>;

template <class Device>
std::vector<double> train_probabilities() {
  const toy_data d = make_data();
  tf::model<probabilities_net, tf::float32, tf::single_device, Device> model(seed);
  model.compile(tf::optimizers::adam{.learning_rate = 0.01f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = false});
  auto data = tf::data::from_tensor_slices<tf::shape<32>>(d.features, d.labels) | tf::data::batch<batch>;
  std::vector<double> losses = model.fit(data, {.epochs = 3, .verbose = 0})["loss"];
  losses.push_back(model.evaluate(data).at("loss"));
  return losses;
}
}  // namespace

TEST_CASE("cuda model: a classifier ending in softmax trains like the CPU model") {
  // three epochs, then evaluate
  cuda_test::check_losses_agree(train_probabilities<tf::cuda>(), train_probabilities<tf::cpu>(), 2e-3, 2);
}

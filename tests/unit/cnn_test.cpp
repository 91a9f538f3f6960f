// Convolutional networks as types: the Keras guide's model at its full size
// (shapes and parameter count by hand, as Keras's summary prints them),
// batch_norm over channels, a whole small CNN's gradients, and a CNN under a
// mixed-precision policy.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <typeflow/typeflow.hpp>

#include "../support/gradient_check.hpp"

namespace tf = typeflow;

namespace {

// Input(224, 224, 3), Conv2D(32, 3, relu), MaxPooling2D, Conv2D(64, 3, relu),
// MaxPooling2D, Flatten, Dense(128, relu), Dense(10, softmax).
using guide_cnn = tf::sequential<tf::input<224, 224, 3>, tf::conv2d<32, 3>, tf::relu, tf::max_pooling2d<2>,
                                 tf::conv2d<64, 3>, tf::relu, tf::max_pooling2d<2>, tf::flatten, tf::dense<128>,
                                 tf::relu, tf::dense<10, tf::float32>, tf::softmax>;

using image = tf::data::tensor_value<float, tf::shape<6, 6, 2>>;
using class_label = tf::data::tensor_value<std::int32_t, tf::shape<>>;

tf::data::batch_of<4, image, class_label> image_batch() {
  tf::data::batch_of<4, image, class_label> b;
  for (std::size_t i = 0; i < b.features.size(); ++i) b.features[i] = 2.f * tf::random_stream{31, 0}.uniform(i) - 1.f;
  for (int i = 0; i < 4; ++i) b.labels[i] = i % 3;
  b.valid = 4;
  return b;
}

const tf::losses::sparse_categorical_crossentropy logits_loss{.from_logits = true};

}  // namespace

TEST_CASE("the guide's 224x224x3 CNN has Keras's shapes and 23,908,682 parameters") {
  // valid 3x3 convolutions take 2 from each side; 2x2 pooling halves, rounding down.
  static_assert(guide_cnn::layer<1>::output_shape::dims == std::array{222, 222, 32});
  static_assert(guide_cnn::layer<3>::output_shape::dims == std::array{111, 111, 32});
  static_assert(guide_cnn::layer<4>::output_shape::dims == std::array{109, 109, 64});
  static_assert(guide_cnn::layer<6>::output_shape::dims == std::array{54, 54, 64});
  static_assert(guide_cnn::layer<7>::output_shape::dims == std::array{54 * 54 * 64});
  // Keras's Param # column: (3*3*3)*32 + 32, (3*3*32)*64 + 64, 186624*128 + 128, 128*10 + 10.
  static_assert(guide_cnn::layer<1>::params::parameter_count == 896);
  static_assert(guide_cnn::layer<4>::params::parameter_count == 18'496);
  static_assert(guide_cnn::layer<8>::params::parameter_count == 23'888'000);
  static_assert(guide_cnn::layer<10>::params::parameter_count == 1'290);
  static_assert(guide_cnn::parameter_count == 23'908'682);
  // relu after a convolution runs inside it (a oneDNN post-op), as after a dense.
  static_assert(guide_cnn::layer<2>::output_aliases_input);
  CHECK(guide_cnn::layer_type_name<3>().find("max_pooling2d") != std::string::npos);
}

TEST_CASE("a small CNN matches finite differences end to end") {
  // Smooth activations and average pooling: a finite-difference step must not
  // cross a kink (relu's, max pooling's choice). Those are checked on their own.
  using net = tf::sequential<tf::input<6, 6, 2>, tf::conv2d<3, 3, 1, tf::padding::same>, tf::tanh,
                             tf::average_pooling2d<2>, tf::conv2d<4, 2>, tf::tanh, tf::global_average_pooling2d,
                             tf::dense<3>>;
  static_assert(net::layer<3>::output_shape::dims == std::array{3, 3, 3});
  static_assert(net::layer<4>::output_shape::dims == std::array{2, 2, 4});
  tf::testing::check_gradients<net>(logits_loss, image_batch());
}

TEST_CASE("batch_norm after a convolution normalises each channel over the batch and positions") {
  using net = tf::sequential<tf::input<6, 6, 2>, tf::conv2d<3, 3>, tf::batch_norm>;
  static_assert(net::layer<2>::params::parameter_count == 4 * 3);  // gamma, beta, moving mean and variance per channel
  tf::model<net> model{2};
  model.compile(tf::optimizers::sgd{.learning_rate = 0.f}, tf::losses::mean_squared_error{});
  using target = tf::data::tensor_value<float, tf::shape<4, 4, 3>>;
  tf::data::batch_of<4, image, target> batch;
  const auto images = image_batch();
  batch.features = images.features;
  batch.valid = 4;
  model.train_on_batch(batch);
  // Keras's momentum rule: moving_mean = 0.99 * 0 + 0.01 * batch mean, per channel.
  const auto moving_mean = model.parameter("layers.2.moving_mean");
  REQUIRE(moving_mean.size() == 3);
  int moved = 0;
  for (float m : moving_mean) moved += m != 0.f;
  CHECK(moved == 3);
}

TEST_CASE("a CNN trains under mixed_bfloat16: convolutions and dense layers in 16 bits") {
  using net = tf::sequential<tf::input<6, 6, 2>, tf::conv2d<4, 3>, tf::relu, tf::flatten, tf::dense<16>, tf::relu,
                             tf::dense<3, tf::float32>>;
  using bound = net::under<tf::mixed_bfloat16>;
  static_assert(std::is_same_v<bound::layer<1>::compute_dtype, tf::bfloat16>);
  static_assert(std::is_same_v<bound::layer<1>::output_dtype, tf::float32>);
  static_assert(std::is_same_v<bound::layer<4>::compute_dtype, tf::bfloat16>);
  tf::model<net, tf::mixed_bfloat16> model{3};
  model.compile(tf::optimizers::adam{.learning_rate = 1e-2}, logits_loss);
  const auto batch = image_batch();
  const double first = model.train_on_batch(batch);
  double last = first;
  for (int step = 0; step < 30; ++step) last = model.train_on_batch(batch);
  CHECK(last < 0.5 * first);
}

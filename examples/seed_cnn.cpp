// The Keras guide's own convolutional network, at its full 224x224x3 size:
//
//   Input(224, 224, 3), Conv2D(32, 3, relu), MaxPooling2D, Conv2D(64, 3, relu),
//   MaxPooling2D, Flatten, Dense(128, relu), Dense(10, softmax, dtype="float32")
//
// declared as a type. The static_asserts below are the guide's model.summary():
// each layer's output shape and the parameter count, worked out by hand from
// Keras's formulas (valid padding: out = in - kernel + 1; pooling 2: floor(in / 2)).
// It then runs a few training steps on synthetic images (each image's class
// decides the brightness of one of ten horizontal bands) to show that it
// trains: the loss must fall.
//
//   seed_cnn [steps]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using seed_cnn = tf::sequential<tf::input<224, 224, 3>,
                                tf::conv2d<32, 3>, tf::relu,     // (222, 222, 32)
                                tf::max_pooling2d<2>,            // (111, 111, 32)
                                tf::conv2d<64, 3>, tf::relu,     // (109, 109, 64)
                                tf::max_pooling2d<2>,            // (54, 54, 64)
                                tf::flatten,                     // (186624,)
                                tf::dense<128>, tf::relu,
                                tf::dense<10, tf::float32>,      // float32 under every policy
                                tf::softmax>;

static_assert(seed_cnn::layer<1>::output_shape::dims == std::array{222, 222, 32});
static_assert(seed_cnn::layer<3>::output_shape::dims == std::array{111, 111, 32});
static_assert(seed_cnn::layer<4>::output_shape::dims == std::array{109, 109, 64});
static_assert(seed_cnn::layer<6>::output_shape::dims == std::array{54, 54, 64});
static_assert(seed_cnn::layer<7>::output_shape::dims == std::array{186'624});
static_assert(seed_cnn::output_shape == tf::shape<10>{});
// Keras's summary: 896 + 18,496 + 23,888,000 + 1,290 = 23,908,682 parameters.
static_assert(seed_cnn::layer<1>::params::parameter_count == 896);         // 3*3*3*32 + 32
static_assert(seed_cnn::layer<4>::params::parameter_count == 18'496);      // 3*3*32*64 + 64
static_assert(seed_cnn::layer<8>::params::parameter_count == 23'888'000);  // 186624*128 + 128
static_assert(seed_cnn::layer<10>::params::parameter_count == 1'290);      // 128*10 + 10
static_assert(seed_cnn::parameter_count == 23'908'682);

int main(int argc, char** argv) try {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 8;
  constexpr int batch = 8;
  using image = tf::data::tensor_value<float, tf::shape<224, 224, 3>>;
  using label = tf::data::tensor_value<std::int32_t, tf::shape<>>;
  tf::data::batch_of<batch, image, label> images;
  const tf::random_stream noise{5, 0};
  for (int n = 0; n < batch; ++n) {
    const int cls = n % 10;
    images.labels[n] = cls;
    for (int y = 0; y < 224; ++y)
      for (int x = 0; x < 224; ++x)
        for (int c = 0; c < 3; ++c) {
          const std::size_t i = ((static_cast<std::size_t>(n) * 224 + y) * 224 + x) * 3 + c;
          images.features[i] = (y * 10 / 224 == cls ? 0.8f : 0.1f) + 0.1f * noise.uniform(i);
        }
  }
  images.valid = batch;

  tf::model<seed_cnn> model{/*seed=*/1};
  model.summary();
  // The softmax is the model's output, so the loss takes probabilities.
  model.compile(tf::optimizers::adam{.learning_rate = 1e-4f}, tf::losses::sparse_categorical_crossentropy{});
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    last = model.train_on_batch(images);
    if (step == 0) first = last;
    std::printf("step %d: loss %.4f\n", step + 1, last);
  }
  std::printf("loss %.4f -> %.4f over %d steps of %d synthetic 224x224x3 images: %s\n", first, last, steps, batch,
              last < first ? "it trains" : "it did NOT fall");
  return last < first ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "seed_cnn: %s\n", e.what());
  return 1;
}

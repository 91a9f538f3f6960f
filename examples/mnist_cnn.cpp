// Trains the Keras guide's convolutional network, sized for MNIST, and
// prints the test accuracy: conv 32 (3x3, relu), max pool, conv 64 (3x3,
// relu), max pool, flatten, dense 128 (relu), dense 10 (logits, float32
// under every policy, as the guide keeps its softmax). Adam 1e-3, batch 64.
//
//   mnist_cnn [data/mnist] [epochs]
//
// Built a second time as mnist_cnn_cuda wherever CMake finds CUDA: the same
// model type on one GPU (example_device.hpp).
//
// Every shape below is computed by the compiler from Keras's formulas; a
// kernel too large for its input, or a pool that leaves nothing, does not
// compile.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "example_device.hpp"  // <typeflow/typeflow.hpp>, or <typeflow/cuda.hpp> for mnist_cnn_cuda

namespace tf = typeflow;

using cnn = tf::sequential<tf::input<28, 28>,
                           tf::reshape<28, 28, 1>,             // channels last, one channel
                           tf::conv2d<32, 3>, tf::relu,        // (26, 26, 32), relu fused into the convolution
                           tf::max_pooling2d<2>,               // (13, 13, 32)
                           tf::conv2d<64, 3>, tf::relu,        // (11, 11, 64)
                           tf::max_pooling2d<2>,               // (5, 5, 64)
                           tf::flatten,                        // (1600,)
                           tf::dense<128>, tf::relu,
                           tf::dense<10, tf::float32>>;        // logits

static_assert(cnn::layer<3>::output_shape::dims == std::array{26, 26, 32});
static_assert(cnn::layer<7>::output_shape::dims == std::array{5, 5, 64});
static_assert(cnn::parameter_count == (3 * 3 * 1 * 32 + 32) + (3 * 3 * 32 * 64 + 64) + (1600 * 128 + 128) +
                                          (128 * 10 + 10));

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : "data/mnist";
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 3;

  auto train = tf::data::mnist(dir, tf::data::split::train)
             | tf::data::map(tf::data::scale(1.f / 255))
             | tf::data::shuffle(60'000, /*seed=*/42)
             | tf::data::batch<64>
             | tf::data::prefetch(2);
  auto test = tf::data::mnist(dir, tf::data::split::test)
            | tf::data::map(tf::data::scale(1.f / 255))
            | tf::data::batch<64>;

  tf::model<cnn, tf::float32, tf::single_device, example::device> model{/*seed=*/42};
  model.summary();
  model.compile(tf::optimizers::adam{.learning_rate = 1e-3f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::accuracy{});
  tf::callbacks::html_report report("mnist_cnn_report.html", {.title = "MNIST CNN"});  // rewritten each epoch
  model.fit(train, {.epochs = epochs, .validation_data = test, .callbacks = {&report}});
  std::printf("report: %s\n", report.filename().c_str());

  const auto result = model.evaluate(test);
  std::printf("test accuracy: %.2f%% (loss %.4f) on %d test images\n", 100 * result.at("accuracy"),
              result.at("loss"), 10'000);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s: %s\n", example::on_gpu ? "mnist_cnn_cuda" : "mnist_cnn", e.what());
  return 1;
}

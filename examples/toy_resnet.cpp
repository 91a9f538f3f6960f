// The Keras functional guide's toy ResNet, as a type, on Fashion-MNIST: a
// convolutional stem, two residual stages joined by add (the skip
// connections a sequential network cannot write), global average pooling
// and a classifier. Prints the summary (with each node's inputs) and the
// test accuracy.
//
//   toy_resnet [dir] [epochs] [training images]   dir: gzipped or raw IDX files,
//                                                 by default Debian's dataset-fashion-mnist
//
// The graph is checked by the compiler: a node that reads a name no node
// has, a cycle, a dead branch or an add of two shapes fails to compile,
// naming the node.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

// Conv2D(64, 3, activation="relu", padding="same"), twice: a stage's branch.
using same_conv = tf::conv2d<64, 3, 1, tf::padding::same>;
using branch = tf::sequential<same_conv, tf::relu, same_conv, tf::relu>;

using toy_resnet = tf::functional<
    tf::input<28, 28>,
    tf::node<"block_1_output",
             tf::sequential<tf::reshape<28, 28, 1>, tf::conv2d<32, 3>, tf::relu,  // (26, 26, 32)
                            tf::conv2d<64, 3>, tf::relu,                          // (24, 24, 64)
                            tf::max_pooling2d<3>>,                                // (8, 8, 64)
             "input">,
    tf::node<"x2", branch, "block_1_output">,
    tf::node<"block_2_output", tf::add, "x2", "block_1_output">,
    tf::node<"x3", branch, "block_2_output">,
    tf::node<"block_3_output", tf::add, "x3", "block_2_output">,
    tf::node<"head",
             tf::sequential<tf::conv2d<64, 3>, tf::relu,  // (6, 6, 64)
                            tf::global_average_pooling2d, tf::dense<256>, tf::relu, tf::dropout<0.5f>>,
             "block_3_output">,
    tf::node<"logits", tf::dense<10>, "head">>;

static_assert(toy_resnet::output_shape == tf::shape<10>{});
static_assert(toy_resnet::layer<1>::node_at<1>::output_shape::dims == std::array{8, 8, 64});

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : tf::data::fashion_mnist_default_dir;
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 3;
  const std::size_t images = argc > 3 ? static_cast<std::size_t>(std::atol(argv[3])) : 60'000;
  constexpr int batch_size = 64;

  auto train = tf::data::fashion_mnist(dir, tf::data::split::train)
             | tf::data::map(tf::data::scale(1.f / 255))
             | tf::data::shuffle(60'000, /*seed=*/3)
             | tf::data::take(std::min<std::size_t>(images, 60'000))
             | tf::data::batch<batch_size>
             | tf::data::prefetch(2);
  auto test = tf::data::fashion_mnist(dir, tf::data::split::test)
            | tf::data::map(tf::data::scale(1.f / 255))
            | tf::data::batch<batch_size>;

  tf::model<toy_resnet> model{/*seed=*/3};
  model.summary();
  model.compile(tf::optimizers::adam{.learning_rate = 1e-3f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::accuracy{});
  model.fit(train, {.epochs = epochs, .validation_data = test});

  const auto result = model.evaluate(test);
  std::printf("test accuracy: %.2f%% (loss %.4f) on 10000 test images\n", 100 * result.at("accuracy"),
              result.at("loss"));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "toy_resnet: %s\n", e.what());
  return 1;
}

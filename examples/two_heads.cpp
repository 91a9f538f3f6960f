// The Keras functional guide's model with several inputs and outputs, as a
// type, on Fashion-MNIST: the image and a per-sample feature (its ink, the
// mean brightness) go in; the class (10 kinds) and a coarse group (tops,
// footwear, other) come out, trained with two weighted losses. Prints the
// summary and each head's test figures.
//
//   two_heads [dir] [epochs] [training images]   dir: gzipped or raw IDX files,
//                                                by default Debian's dataset-fashion-mnist
//
// The compiler checks the wiring and the losses: a loss for an output the
// network lacks, an input nothing reads, or a dataset whose features are
// not the network's inputs fails to compile, naming it.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;
namespace data = typeflow::data;

using two_heads = tf::functional<
    tf::node<"image", tf::input<28, 28>>,
    tf::node<"ink", tf::input<1>>,
    tf::node<"image_features",
             tf::sequential<tf::reshape<28, 28, 1>, tf::conv2d<16, 3>, tf::relu, tf::max_pooling2d<2>,  // (13, 13, 16)
                            tf::conv2d<32, 3>, tf::relu, tf::max_pooling2d<2>, tf::flatten>,             // (800)
             "image">,
    tf::node<"ink_features", tf::sequential<tf::dense<8>, tf::relu>, "ink">,
    tf::node<"joined", tf::concatenate<>, "image_features", "ink_features">,  // (808)
    tf::node<"hidden", tf::sequential<tf::dense<128>, tf::relu>, "joined">,
    tf::node<"class", tf::dense<10>, "hidden">,  // logits over the 10 kinds
    tf::node<"group", tf::dense<3>, "hidden">,   // logits over tops, footwear, other
    tf::outputs<"class", "group">>;

// Fashion-MNIST's kinds by group: tops (T-shirt, pullover, coat, shirt),
// footwear (sandal, sneaker, ankle boot), other (trouser, dress, bag).
constexpr std::int32_t group_of(std::int32_t kind) {
  constexpr std::int32_t groups[10] = {0, 2, 0, 2, 0, 1, 0, 1, 2, 1};
  return groups[kind];
}

// An example of the pipeline becomes one of named parts: features
// {image, ink}, labels {class, group}.
constexpr auto named_parts = [](const auto& e) {
  data::tensor_value<float, tf::shape<1>> ink{};
  for (float v : e.features.values) ink[0] += v / 784.f;
  data::tensor_value<std::int32_t, tf::shape<>> group{};
  group[0] = group_of(e.label[0]);
  return data::example{data::parts(data::named<"image">(e.features), data::named<"ink">(ink)),
                       data::parts(data::named<"class">(e.label), data::named<"group">(group))};
};

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : tf::data::fashion_mnist_default_dir;
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 3;
  const std::size_t images = argc > 3 ? static_cast<std::size_t>(std::atol(argv[3])) : 60'000;
  constexpr int batch_size = 64;

  auto train = data::fashion_mnist(dir, data::split::train)
             | data::map(data::scale(1.f / 255))
             | data::map(named_parts)
             | data::shuffle(60'000, /*seed=*/5)
             | data::take(std::min<std::size_t>(images, 60'000))
             | data::batch<batch_size>
             | data::prefetch(2);
  auto test = data::fashion_mnist(dir, data::split::test)
            | data::map(data::scale(1.f / 255))
            | data::map(named_parts)
            | data::batch<batch_size>;

  tf::model<two_heads> model{/*seed=*/5};
  model.summary();
  // The class is the main task; the group, easier, helps it and weighs less.
  model.compile(tf::optimizers::adam{.learning_rate = 1e-3f},
                tf::on_output<"class">(tf::losses::sparse_categorical_crossentropy{.from_logits = true}, 1.0),
                tf::on_output<"group">(tf::losses::sparse_categorical_crossentropy{.from_logits = true}, 0.5),
                tf::metrics::accuracy{});  // for every output: class_accuracy, group_accuracy
  model.fit(train, {.epochs = epochs, .validation_data = test});

  const auto result = model.evaluate(test);
  std::printf("test: class accuracy %.2f%% (loss %.4f), group accuracy %.2f%% (loss %.4f), total loss %.4f\n",
              100 * result.at("class_accuracy"), result.at("class_loss"), 100 * result.at("group_accuracy"),
              result.at("group_loss"), result.at("loss"));
  // predict gives each output by name: the first test image's two answers.
  const tf::predictions out = model.predict(test | data::take(1));
  const auto& logits = out.at("class");
  const auto& groups = out.at("group");
  std::printf("first test image: kind %d, group %d\n",
              static_cast<int>(std::max_element(logits.begin(), logits.begin() + 10) - logits.begin()),
              static_cast<int>(std::max_element(groups.begin(), groups.begin() + 3) - groups.begin()));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "two_heads: %s\n", e.what());
  return 1;
}

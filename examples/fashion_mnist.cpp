// Trains an MLP with batch normalization and dropout on Fashion-MNIST, with
// AdamW, global gradient-norm clipping and a cosine decay after a linear
// warmup, and prints the test accuracy.
//
//   fashion_mnist [dir] [epochs]     dir: gzipped or raw IDX files, by default
//                                    Debian's dataset-fashion-mnist
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using mlp = tf::sequential<tf::input<28, 28>, tf::flatten,
                           tf::dense<512>, tf::batch_norm, tf::relu, tf::dropout<0.3f>,
                           tf::dense<256>, tf::batch_norm, tf::relu, tf::dropout<0.3f>,
                           tf::dense<10>>;  // logits

static_assert(mlp::output_shape == tf::shape<10>{});

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : tf::data::fashion_mnist_default_dir;
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 5;
  constexpr int batch_size = 128;

  auto train = tf::data::fashion_mnist(dir, tf::data::split::train)
             | tf::data::map(tf::data::scale(1.f / 255))
             | tf::data::shuffle(60'000, /*seed=*/7)
             | tf::data::batch<batch_size>
             | tf::data::prefetch(2);
  auto test = tf::data::fashion_mnist(dir, tf::data::split::test)
            | tf::data::map(tf::data::scale(1.f / 255))
            | tf::data::batch<batch_size>;

  const std::int64_t steps = epochs * (60'000 / batch_size);
  tf::model<mlp> model{/*seed=*/7};
  model.summary();
  model.compile(tf::optimizers::adamw{.learning_rate = tf::schedules::cosine_decay{2e-3, steps - steps / 10,
                                                                                  {.warmup_steps = steps / 10}},
                                      .weight_decay = 1e-2f,
                                      .global_clipnorm = 1.f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::accuracy{});
  tf::callbacks::html_report report("fashion_mnist_report.html", {.title = "Fashion-MNIST"});  // rewritten each epoch
  model.fit(train, {.epochs = epochs, .validation_data = test, .callbacks = {&report}});
  std::printf("report: %s\n", report.filename().c_str());

  const auto result = model.evaluate(test);
  std::printf("test accuracy: %.2f%% (loss %.4f) on 10000 test images\n", 100 * result.at("accuracy"),
              result.at("loss"));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
  return 1;
}

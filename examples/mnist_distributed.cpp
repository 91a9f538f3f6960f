// Trains the MNIST MLP with two data-parallel replicas (mirrored<2>, one
// thread each) and gradient accumulation over two micro-batches, so each
// update sees 2 x 2 x 64 = 256 samples; then prints the test accuracy.
//
//   mnist_distributed [data/mnist] [epochs]
//
// The strategy is part of the model's type: a batch that does not split
// evenly over the replicas is a compile error.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using mlp = tf::sequential<tf::input<28, 28>, tf::flatten,
                           tf::dense<512>, tf::relu, tf::dropout<0.2f>,
                           tf::dense<512>, tf::relu, tf::dropout<0.2f>,
                           tf::dense<10>>;

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : "data/mnist";
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 3;

  auto train = tf::data::mnist(dir, tf::data::split::train)
             | tf::data::map(tf::data::scale(1.f / 255))
             | tf::data::shuffle(60'000, /*seed=*/42)
             | tf::data::batch<128>         // the global batch: 64 per replica
             | tf::data::prefetch(2);
  auto test = tf::data::mnist(dir, tf::data::split::test)
            | tf::data::map(tf::data::scale(1.f / 255))
            | tf::data::batch<128>;

  tf::model<mlp, tf::float32, tf::mirrored<2>> model{/*seed=*/42};
  model.compile(tf::optimizers::accumulate<2>(tf::optimizers::adam{.learning_rate = 1e-3}),
                tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::accuracy{});
  tf::callbacks::html_report report("mnist_distributed_report.html", {.title = "MNIST MLP on mirrored<2>"});  // rewritten each epoch
  model.fit(train, {.epochs = epochs, .validation_data = test, .callbacks = {&report}});
  std::printf("report: %s\n", report.filename().c_str());
  const auto result = model.evaluate(test);
  std::printf("test accuracy: %.2f%% (loss %.4f), %lld updates of 256 samples on 2 replicas\n",
              100 * result.at("accuracy"), result.at("loss"), static_cast<long long>(model.iterations()));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mnist_distributed: %s\n", e.what());
  return 1;
}

// Trains a 784-512-512-10 relu MLP on MNIST with Adam (learning rate 1e-3,
// batch 128) and prints the test accuracy. Dropout of 0.2 after each hidden
// layer, as in Keras's own MNIST MLP example, buys about 0.3 points.
//
//   mnist_mlp [data/mnist] [epochs] [float32 | mixed_bfloat16 | mixed_float16]
//
// The network is a type: its shapes and parameter count are checked by the
// compiler below, before anything runs. The precision policy is part of the
// model's type too; the third argument picks one of three instantiations.
// Under a mixed policy the hidden layers compute in 16 bits and store their
// outputs in 16 bits, and the logits layer stays float32 (as Keras's
// dtype="float32" on the output layer); mixed_float16 also scales the loss.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using mlp = tf::sequential<tf::input<28, 28>,
                           tf::flatten,                 // (784,)
                           tf::dense<512>, tf::relu,    // fused: one oneDNN matmul with a relu post-op
                           tf::dropout<0.2f>,
                           tf::dense<512>, tf::relu,
                           tf::dropout<0.2f>,
                           tf::dense<10, tf::float32>>; // logits, float32 under every policy

static_assert(mlp::output_shape == tf::shape<10>{});
static_assert(mlp::parameter_count == 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);

template <class Policy>
int train(const std::string& dir, int epochs) {
  auto train = tf::data::mnist(dir, tf::data::split::train)
             | tf::data::map(tf::data::scale(1.f / 255))
             | tf::data::shuffle(60'000, /*seed=*/42)
             | tf::data::batch<128>;
  auto test = tf::data::mnist(dir, tf::data::split::test)
            | tf::data::map(tf::data::scale(1.f / 255))
            | tf::data::batch<128>;

  tf::model<mlp, Policy> model{/*seed=*/42};
  model.summary();
  model.compile(tf::optimizers::adam{.learning_rate = 1e-3f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::accuracy{});
  // TensorBoard's event files (tensorboard --logdir logs) and one HTML page, rewritten each epoch.
  tf::callbacks::tensorboard board("logs/mnist_mlp", {.update_freq = 50});
  tf::callbacks::html_report report("mnist_mlp_report.html", {.title = "MNIST MLP (" + tf::policy_name<Policy>() + ")"});
  model.fit(train, {.epochs = epochs, .validation_data = test, .callbacks = {&board, &report}});
  std::printf("report: %s, TensorBoard logs: logs/mnist_mlp\n", report.filename().c_str());

  const auto result = model.evaluate(test);
  std::printf("test accuracy: %.2f%% (loss %.4f) on %d test images\n", 100 * result.at("accuracy"),
              result.at("loss"), 10'000);
  if constexpr (decltype(model)::loss_scaling)
    std::printf("loss scale %g, %lld steps skipped\n", model.loss_scale(),
                static_cast<long long>(model.skipped_steps()));
  model.save_weights("mnist_mlp.safetensors");
  std::printf("weights saved to mnist_mlp.safetensors\n");
  return 0;
}

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : "data/mnist";
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 3;
  const std::string policy = argc > 3 ? argv[3] : "float32";
  if (policy == "float32") return train<tf::float32_policy>(dir, epochs);
  if (policy == "mixed_bfloat16") return train<tf::mixed_bfloat16>(dir, epochs);
  if (policy == "mixed_float16") return train<tf::mixed_float16>(dir, epochs);
  std::fprintf(stderr, "mnist_mlp: unknown policy \"%s\"; use float32, mixed_bfloat16 or mixed_float16\n",
               policy.c_str());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mnist_mlp: %s\n", e.what());
  return 1;
}

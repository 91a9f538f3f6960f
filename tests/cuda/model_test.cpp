// model<Net, Policy, single_device, cuda> against the same model type on the
// CPU: the same seed gives the same weights, the same dropout masks and, up to
// float32 summation order, the same training run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <string>

#include <typeflow/cuda.hpp>

#include "../support/test_support.hpp"
#include "model_reference.hpp"

namespace {
using namespace cuda_reference;

auto toy_dataset(const toy_data& d) {
  return tf::data::from_tensor_slices<tf::shape<32>>(d.features, d.labels) | tf::data::batch<batch>;
}
}  // namespace

TEST_CASE("cuda model: starts from the CPU model's weights, bit for bit") {
  tf::model<mlp, tf::float32, tf::single_device, tf::cuda> gpu(seed);
  tf::model<mlp> cpu_shape_only(seed);  // constructing a CPU model runs no oneDNN code
  const auto a = gpu.parameter_region();
  const auto b = cpu_shape_only.parameter_region();
  REQUIRE(a.size() == b.size());
  CHECK(std::equal(a.begin(), a.end(), b.begin()));
}

TEST_CASE("cuda model: trains like the CPU model (dense, relu, dropout, layer_norm, tanh, gelu, fused gelu_tanh; Adam)") {
  constexpr int epochs = 3;
  const run_result cpu = train_on_cpu(epochs);
  const toy_data d = make_data();
  tf::model<mlp, tf::float32, tf::single_device, tf::cuda> gpu(seed);
  gpu.compile(tf::optimizers::adam{.learning_rate = 0.01f},
              tf::losses::sparse_categorical_crossentropy{.from_logits = true},
              tf::metrics::sparse_categorical_accuracy{});
  const auto history = gpu.fit(toy_dataset(d), {.epochs = epochs, .verbose = 0});
  const auto& losses = history["loss"];
  REQUIRE(losses.size() == static_cast<std::size_t>(epochs));
  for (int e = 0; e < epochs; ++e) {
    INFO("epoch " << e + 1 << ": gpu " << losses[e] << ", cpu " << cpu.losses[e]);
    CHECK(losses[e] == doctest::Approx(cpu.losses[e]).epsilon(2e-3));
    CHECK(history["sparse_categorical_accuracy"][e] == doctest::Approx(cpu.accuracies[e]).epsilon(0.02));
  }
  CHECK(losses.back() < losses.front());  // it learns
  CHECK(gpu.iterations() == epochs * samples / batch);
  const auto region = gpu.parameter_region();
  REQUIRE(region.size() == cpu.parameters.size());
  const region_distance gap = distance_between(region, cpu.parameters);
  INFO("largest weight difference " << gap.worst << " of weights up to " << gap.largest);
  CHECK(gap.worst < 1e-2 * gap.largest);
}

TEST_CASE("cuda model: evaluate matches the training loss' scale and weights round-trip through a file") {
  const toy_data d = make_data();
  tf::model<mlp, tf::float32, tf::single_device, tf::cuda> gpu(seed);
  gpu.compile(tf::optimizers::sgd{.learning_rate = 0.05f, .momentum = 0.9f},
              tf::losses::sparse_categorical_crossentropy{.from_logits = true},
              tf::metrics::sparse_categorical_accuracy{});
  const auto before = gpu.evaluate(toy_dataset(d));
  gpu.fit(toy_dataset(d), {.epochs = 4, .verbose = 0});
  const auto after = gpu.evaluate(toy_dataset(d));
  CHECK(after.at("loss") < before.at("loss"));
  // predict's outputs give evaluate's accuracy.
  const std::vector<float> outputs = gpu.predict(toy_dataset(d));
  REQUIRE(outputs.size() == static_cast<std::size_t>(samples) * 10);
  int hits = 0;
  for (int i = 0; i < samples; ++i) {
    const float* row = outputs.data() + i * 10;
    hits += static_cast<int>(std::max_element(row, row + 10) - row) == d.labels[static_cast<std::size_t>(i)];
  }
  CHECK(static_cast<double>(hits) / samples == doctest::Approx(after.at("sparse_categorical_accuracy")));
  const auto path = std::filesystem::temp_directory_path() / "typeflow_cuda_model_test.safetensors";
  gpu.save_weights(path);
  tf::model<mlp, tf::float32, tf::single_device, tf::cuda> loaded(seed + 1);
  loaded.compile(tf::optimizers::sgd{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                 tf::metrics::sparse_categorical_accuracy{});
  loaded.load_weights(path);
  const auto reloaded = loaded.evaluate(toy_dataset(d));
  CHECK(reloaded.at("loss") == doctest::Approx(after.at("loss")).epsilon(1e-6));
  std::filesystem::remove(path);
}

TEST_CASE("cuda model: a graph replay sees each step's new values (the dropout counter and Adam's step)") {
  // Two models, one trained with train_on_batch step by step, one with fit:
  // the same steps, so the same weights, only if every replay reads the
  // step's own counter and learning-rate terms.
  const toy_data d = make_data();
  tf::model<mlp, tf::float32, tf::single_device, tf::cuda> by_fit(seed), by_batch(seed);
  for (auto* m : {&by_fit, &by_batch})
    m->compile(tf::optimizers::adam{.learning_rate = 0.01f},
               tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  by_fit.fit(toy_dataset(d), {.epochs = 1, .verbose = 0});
  auto cursor = toy_dataset(d).open(0);
  typename decltype(toy_dataset(d))::element_type b;
  while (cursor.next(b)) by_batch.train_on_batch(b);
  const auto x = by_fit.parameter_region();
  const auto y = by_batch.parameter_region();
  CHECK(std::equal(x.begin(), x.end(), y.begin()));
}

TEST_CASE("cuda model: a checkpoint continues the run bit for bit, and a backup continues a crashed fit") {
  const toy_data d = make_data();
  const auto compile = [](auto& m) {
    m.compile(tf::optimizers::adam{.learning_rate = 0.01f},
              tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  };
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "typeflow_cuda_checkpoint_test";
  std::filesystem::remove_all(dir);
  tf::model<mlp, tf::float32, tf::single_device, tf::cuda> whole(seed), first(seed), resumed(seed + 1);
  compile(whole);
  compile(first);
  compile(resumed);
  whole.fit(toy_dataset(d), {.epochs = 2, .verbose = 0});
  // A checkpoint written mid-epoch 2 (dropout's counter, Adam's slots and step, the position in the data).
  tf::callbacks::lambda_callback save({.on_train_batch_end = [&](std::int64_t, const tf::logs&) {
    if (first.iterations() == samples / batch + 1) first.save_checkpoint(dir);
  }});
  first.fit(toy_dataset(d), {.epochs = 2, .callbacks = {&save}, .verbose = 0});
  resumed.load_checkpoint(dir);
  resumed.fit(toy_dataset(d), {.epochs = 2, .verbose = 0});
  CHECK(resumed.iterations() == whole.iterations());
  // Equal up to the GPU's summation order (bit for bit where its kernels are deterministic).
  const auto a = resumed.parameter_region(), b = whole.parameter_region();
  REQUIRE(a.size() == b.size());
  double worst = 0, largest = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(double{a[i]} - b[i]));
    largest = std::max(largest, std::fabs(double{b[i]}));
  }
  INFO("largest difference " << worst << " of weights up to " << largest);
  CHECK(worst <= 1e-5 * largest);
  std::filesystem::remove_all(dir);
}

TEST_CASE("cuda model: a sparse label outside [0, classes) is refused before its step, as on the CPU") {
  toy_data d = make_data();
  tf::model<mlp, tf::float32, tf::single_device, tf::cuda> gpu(seed);
  gpu.compile(tf::optimizers::sgd{.learning_rate = 0.05f},
              tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  // Batch 2 of the epoch holds a label of 10 (of 10 classes): batch 1 trains, then fit stops.
  d.labels[static_cast<std::size_t>(batch + 3)] = 10;
  const std::string message = tf::testing::message_of<std::invalid_argument>([&] { gpu.fit(toy_dataset(d), {.epochs = 1, .verbose = 0}); });
  CHECK(message.find("sparse labels are class ids in [0, 10); label 3 of the batch is 10") != std::string::npos);
  CHECK(gpu.iterations() == 1);
  d.labels[static_cast<std::size_t>(batch + 3)] = -1;
  const std::string evaluated = tf::testing::message_of<std::invalid_argument>([&] { gpu.evaluate(toy_dataset(d)); });
  CHECK(evaluated.find("label 3 of the batch is -1") != std::string::npos);
}

TEST_CASE("cuda model: sample weights, class_weight and a last partial batch train as on the CPU") {
  constexpr int epochs = 2;
  const toy_data d = make_data();
  for (const bool by_sample : {true, false}) {
    INFO("by_sample " << by_sample);
    const run_result cpu = train_weighted_on_cpu(epochs, by_sample);
    tf::model<mlp, tf::float32, tf::single_device, tf::cuda> gpu(seed);
    gpu.compile(tf::optimizers::adam{.learning_rate = 0.01f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::sparse_categorical_accuracy{});
    const auto history = by_sample ? gpu.fit(weighted_dataset(d, true), {.epochs = epochs, .verbose = 0})
                                   : gpu.fit(unweighted_dataset(d), {.epochs = epochs, .verbose = 0,
                                                                     .class_weight = weighted_classes()});
    CHECK(gpu.iterations() == epochs * 10);  // ceil(150 / 16): the partial batch of 6 trains
    for (int e = 0; e < epochs; ++e) {
      INFO("epoch " << e + 1 << ": gpu " << history["loss"][e] << ", cpu " << cpu.losses[e]);
      CHECK(history["loss"][e] == doctest::Approx(cpu.losses[e]).epsilon(2e-3));
      CHECK(history["sparse_categorical_accuracy"][e] == doctest::Approx(cpu.accuracies[e]).epsilon(0.02));
    }
    const region_distance gap = distance_between(gpu.parameter_region(), cpu.parameters);
    INFO("largest weight difference " << gap.worst << " of weights up to " << gap.largest);
    CHECK(gap.worst < 1e-2 * gap.largest);
    // evaluate weighs the loss by the sample weights on the host.
    if (by_sample) {
      const double weighted = gpu.evaluate(weighted_dataset(d, true)).at("loss");
      const auto z = gpu.predict(unweighted_dataset(d));
      double expected = 0;
      for (int i = 0; i < weighted_samples; ++i) {
        double sum = 0;
        for (int j = 0; j < 10; ++j) sum += std::exp(static_cast<double>(z(i, j)));
        expected += 0.5 * (i % 4) * (std::log(sum) - z(i, d.labels[static_cast<std::size_t>(i)])) / weighted_samples;
      }
      CHECK(weighted == doctest::Approx(expected).epsilon(1e-4));
    }
  }
}

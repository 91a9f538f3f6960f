// The model as a type, and what compile/fit/evaluate/predict/save promise.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

namespace {

using mlp = tf::sequential<tf::input<28, 28>, tf::flatten, tf::dense<32>, tf::relu, tf::dropout<0.1f>,
                           tf::dense<10>>;

// A learnable toy problem: class c lights up feature c (plus noise).
struct toy_data {
  std::vector<float> features;
  std::vector<std::int32_t> labels;
  explicit toy_data(int samples) {
    for (int i = 0; i < samples; ++i) {
      const int c = (i * 7) % 4;
      for (int j = 0; j < 8; ++j)
        features.push_back((j == c ? 1.f : 0.f) + 0.3f * (2.f * tf::random_stream{5, 0}.uniform(i * 8 + j) - 1.f));
      labels.push_back(c);
    }
  }
};
using toy_net = tf::sequential<tf::input<8>, tf::dense<16>, tf::relu, tf::dense<4>>;

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("typeflow_model_test_" + name);
}

}  // namespace

TEST_CASE("a sequential knows its shapes, parameter count and FLOPs at compile time") {
  static_assert(mlp::output_shape == tf::shape<10>{});
  static_assert(mlp::input_shape == tf::shape<28, 28>{});
  static_assert(mlp::layer_count == 6);
  static_assert(std::is_same_v<mlp::layer<1>::output_shape, tf::shape<784>>);
  static_assert(mlp::parameter_count == 784 * 32 + 32 + 32 * 10 + 10);
  static_assert(mlp::flops_per_sample == 2 * 784 * 32 + 2 * 32 * 10 + 32);  // + dropout's multiply
  // dense over the last axis keeps the leading ones, as Keras's Dense.
  using seq = tf::sequential<tf::input<5, 6>, tf::dense<3>>;
  static_assert(seq::output_shape == tf::shape<5, 3>{});
  static_assert(seq::parameter_count == 6 * 3 + 3);
  static_assert(seq::flops_per_sample == 2 * 5 * 6 * 3);
  // Hana sees the specs as a type list.
  static_assert(boost::hana::length(mlp::specs) == boost::hana::size_c<6>);
  CHECK(mlp::layer_type_name<4>() == "dropout<0.1>");
}

TEST_CASE("relu after dense is fused into the matmul, after a reshape it is not") {
  static_assert(mlp::layer<2>::fused == tf::epilogue::relu);
  static_assert(mlp::layer<3>::fused && mlp::layer<3>::output_aliases_input);
  using unfused = tf::sequential<tf::input<4>, tf::dense<4>, tf::reshape<2, 2>, tf::relu>;
  static_assert(unfused::layer<1>::fused == tf::epilogue::none);
  static_assert(!unfused::layer<3>::fused);
  CHECK(true);
}

TEST_CASE("the memory plan aligns every buffer and shares buffers where layers allow") {
  using plan = tf::memory_plan<mlp, 16, 2>;
  // Each parameter tensor starts on a 64-byte boundary: 784 rows of 32
  // floats, then the bias of 32 floats, then the second kernel, whose rows of
  // 10 are stored 16 apart, then its bias of 10 padded to 16.
  static_assert(plan::layer_parameter_offset[2] == 0);
  static_assert(plan::layer_parameter_offset[5] == (784 * 32 + 32) * sizeof(float));
  static_assert(mlp::parameter_floats == 784 * 32 + 32 + 32 * 16 + 16);
  // Rows whose stride would be a multiple of 512 bytes get 64 more.
  static_assert(tf::padded_row_length(10) == 16 && tf::padded_row_length(784) == 784 &&
                tf::padded_row_length(512) == 528 && tf::padded_row_length(1024) == 1040);
  static_assert(plan::gradients_offset == mlp::parameter_floats * sizeof(float));
  static_assert(plan::slot_offset(1) == plan::gradients_offset + 2 * mlp::parameter_floats * sizeof(float));
  // flatten and the fused relu reuse their input's buffer; dropout does not.
  static_assert(plan::activation_offset[1] == plan::activation_offset[0]);
  static_assert(plan::activation_offset[3] == plan::activation_offset[2]);
  static_assert(plan::activation_offset[4] != plan::activation_offset[3]);
  static_assert(plan::activation_bytes == 16 * (784 + 32 + 32 + 10) * sizeof(float));
  // The loss's gradient goes to buffer 0; dense<10> writes its input's
  // gradient into the other one; dropout and relu work in place.
  static_assert(plan::output_gradient_buffer[5] == 0 && plan::output_gradient_buffer[4] == 1 &&
                plan::output_gradient_buffer[2] == 1);
  static_assert(plan::workspace_offset[5] - plan::workspace_offset[4] == 16 * 32);  // dropout's mask bytes
  for (std::size_t offset : plan::activation_offset) CHECK(offset % 64 == 0);
  CHECK(plan::total_bytes % 64 == 0);
}

TEST_CASE("the same seed gives the same weights, another seed other weights") {
  tf::model<mlp> a{42}, b{42}, c{43};
  const auto wa = a.parameter_region(), wb = b.parameter_region(), wc = c.parameter_region();
  CHECK(std::equal(wa.begin(), wa.end(), wb.begin()));
  CHECK(!std::equal(wa.begin(), wa.end(), wc.begin()));
  // glorot_uniform's limit for (784, 32) is sqrt(6 / 816); biases start at zero.
  const float limit = std::sqrt(6.f / (784 + 32));
  float largest = 0, sum = 0;
  for (float w : a.parameter("layers.2.kernel")) {
    largest = std::max(largest, std::fabs(w));
    sum += w;
  }
  CHECK(largest <= limit);
  CHECK(largest > 0.95f * limit);
  CHECK(std::fabs(sum / (784 * 32)) < 0.01f * limit);
  for (float b0 : a.parameter("layers.2.bias")) CHECK(b0 == 0.f);
}

TEST_CASE("a seeded training run is reproducible bit for bit") {
  toy_data toy(200);
  auto run = [&] {
    auto data = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::shuffle(200, 3) |
                tf::data::batch<16>;
    tf::model<tf::sequential<tf::input<8>, tf::dense<16>, tf::relu, tf::dropout<0.3f>, tf::dense<4>>> model{9};
    model.compile(tf::optimizers::adam{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
    model.fit(data, {.epochs = 2, .verbose = 0});
    const auto w = model.parameter_region();
    return std::vector<float>(w.begin(), w.end());
  };
  const auto first = run(), second = run();
  CHECK(first == second);
}

TEST_CASE("fit learns a separable problem, trains the last partial batch and reports History") {
  toy_data toy(330);  // 20 full batches of 16, and 10 left over
  auto data = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::shuffle(330, 1) |
              tf::data::batch<16>;
  tf::model<toy_net> model{1};
  model.compile(tf::optimizers::adam{.learning_rate = 0.01f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true}, tf::metrics::accuracy{});
  const auto history = model.fit(data, {.epochs = 4, .validation_data = data, .verbose = 0});
  CHECK(model.iterations() == 4 * 21);  // as Keras: ceil(330 / 16) steps an epoch
  REQUIRE(history.epochs() == 4);
  CHECK(history["loss"].back() < history["loss"].front());
  CHECK(history["val_accuracy"].back() > 0.95);
  CHECK(history.contains("learning_rate"));
}

// fit reads batch k + 1 while step k runs: the metrics of step k must still
// see batch k's labels. The labels here are the model's own predictions, and
// differ from batch to batch, so the accuracy is 1 only if each step's outputs
// meet their own labels (reading the next batch's gave about a quarter).
template <class Strategy>
void check_metrics_read_own_labels() {
  toy_data toy(1000);  // 15 batches of 64 and one of 40
  tf::model<toy_net, tf::float32, Strategy> still{4};
  still.compile(tf::optimizers::sgd{.learning_rate = 0.0}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::accuracy{});
  const auto z = still.predict(tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::batch<64>);
  std::vector<std::int32_t> predicted(1000);
  for (std::size_t i = 0; i < predicted.size(); ++i)
    predicted[i] = static_cast<std::int32_t>(std::max_element(&z[i * 4], &z[i * 4] + 4) - &z[i * 4]);
  REQUIRE(std::count(predicted.begin(), predicted.end(), predicted[0]) < 900);  // not one class throughout
  auto data = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, predicted) | tf::data::batch<64>;
  const auto history = still.fit(data, {.epochs = 2, .verbose = 0});
  CHECK(history["accuracy"][0] == 1.0);
  CHECK(history["accuracy"][1] == 1.0);
  CHECK(still.evaluate(data).at("accuracy") == 1.0);
}

TEST_CASE("fit's metrics read each step's own labels, not the next batch's staged beside it") {
  check_metrics_read_own_labels<tf::single_device>();
  check_metrics_read_own_labels<tf::mirrored<2>>();
  check_metrics_read_own_labels<tf::zero<1, tf::mirrored<2>>>();
}

TEST_CASE("a last partial batch trains as Keras's: ceil(n / batch) steps, the epoch's means over all n rows") {
  toy_data toy(1000);  // 15 batches of 64 and one of 40
  auto data = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::batch<64>;
  // A learning rate of 0: the weights stay, so the epoch's loss and accuracy are those of predict's outputs.
  tf::model<toy_net> still{4};
  still.compile(tf::optimizers::sgd{.learning_rate = 0.0}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::accuracy{});
  const auto z = still.predict(data);
  double loss = 0;
  int hits = 0;
  for (std::size_t i = 0; i < 1000; ++i) {
    const float* row = &z[i * 4];
    double sum = 0;
    for (int j = 0; j < 4; ++j) sum += std::exp(static_cast<double>(row[j]));
    loss += std::log(sum) - row[toy.labels[i]];
    hits += static_cast<int>(std::max_element(row, row + 4) - row) == toy.labels[i];
  }
  const auto history = still.fit(data, {.verbose = 0});
  CHECK(still.iterations() == 16);
  CHECK(history["loss"][0] == doctest::Approx(loss / 1000).epsilon(1e-5));
  CHECK(history["accuracy"][0] == doctest::Approx(hits / 1000.0));

  // The partial batch's gradient is the mean over its 40 rows: on one replica
  // and on mirrored<2> (32 rows and 8) the weights after an epoch agree.
  tf::model<toy_net> single{6};
  tf::model<toy_net, tf::float32, tf::mirrored<2>> pair{6};
  single.compile(tf::optimizers::sgd{.learning_rate = 0.5}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  pair.compile(tf::optimizers::sgd{.learning_rate = 0.5}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const auto single_history = single.fit(data, {.verbose = 0});
  const auto pair_history = pair.fit(data, {.verbose = 0});
  CHECK(pair.iterations() == 16);
  CHECK(pair_history["loss"][0] == doctest::Approx(single_history["loss"][0]).epsilon(1e-5));
  const auto a = single.get_weights(), b = pair.get_weights();
  for (std::size_t t = 0; t < a.size(); ++t)
    for (std::size_t i = 0; i < a[t].values.size(); ++i)
      CHECK(a[t].values[i] == doctest::Approx(b[t].values[i]).epsilon(1e-4).scale(1.0));
  // A batch of 40 alone (smaller than one batch) trains too; only an empty dataset is refused.
  auto tiny = tf::data::from_tensor_slices<tf::shape<8>>(std::vector<float>(toy.features.begin(), toy.features.begin() + 40 * 8),
                                                          std::vector<std::int32_t>(toy.labels.begin(), toy.labels.begin() + 40)) |
              tf::data::batch<64>;
  single.fit(tiny, {.verbose = 0});
  CHECK(single.iterations() == 17);
}

TEST_CASE("evaluate counts every sample, padding the last batch, and matches predict") {
  toy_data toy(50);  // batches of 16: 16, 16, 16, and 2 real samples in the last
  auto data = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::batch<16>;
  tf::model<toy_net> model{2};
  model.compile(tf::optimizers::sgd{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::accuracy{});
  const tf::host_tensor outputs = model.predict(data);
  REQUIRE(outputs.size() == 50 * 4);
  // predict's tensor has Keras's shape (samples, outputs) and reads by index.
  CHECK(outputs.shape() == std::vector<std::int64_t>{50, 4});
  CHECK(outputs.shape_string() == "(50, 4)");
  CHECK(outputs(49, 3) == outputs[49 * 4 + 3]);
  CHECK_THROWS_WITH_AS(outputs(50, 0), doctest::Contains("index 50 on axis 0 of shape (50, 4)"), std::out_of_range);
  CHECK_THROWS_WITH_AS(outputs(1), doctest::Contains("1 indices for a tensor of shape (50, 4)"), std::out_of_range);
  const std::vector<float> flat = outputs;  // still the flat values
  CHECK(flat.size() == 200);
  double loss = 0;
  int hits = 0;
  for (int i = 0; i < 50; ++i) {
    const float* z = &outputs[i * 4];
    const int best = static_cast<int>(std::max_element(z, z + 4) - z);
    hits += best == toy.labels[i];
    double lse = 0;
    for (int j = 0; j < 4; ++j) lse += std::exp(z[j]);
    loss += std::log(lse) - z[toy.labels[i]];
  }
  const auto result = model.evaluate(data);
  CHECK(result.at("accuracy") == doctest::Approx(hits / 50.0));
  CHECK(result.at("loss") == doctest::Approx(loss / 50).epsilon(1e-5));
}

TEST_CASE("test_on_batch and predict_on_batch give evaluate's and predict's values for one batch, padding masked") {
  toy_data toy(50);
  auto data = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::batch<16>;
  tf::model<toy_net> model{2};
  model.compile(tf::optimizers::sgd{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::accuracy{});
  std::vector<decltype(data)::element_type> batches;
  for (const auto& b : data) batches.push_back(b);
  REQUIRE(batches.size() == 4);
  REQUIRE(batches[3].valid == 2);
  const auto all = model.predict(data);
  std::size_t at = 0;
  for (const auto& b : batches) {
    const auto outputs = model.predict_on_batch(b);
    REQUIRE(outputs.size() == static_cast<std::size_t>(b.valid) * 4);
    for (std::size_t i = 0; i < outputs.size(); ++i) CHECK(outputs[i] == all[at + i]);
    at += outputs.size();
    // The loss over the batch's valid rows, from its outputs.
    double loss = 0;
    int hits = 0;
    for (int i = 0; i < b.valid; ++i) {
      const float* z = &outputs[static_cast<std::size_t>(i) * 4];
      double lse = 0;
      for (int j = 0; j < 4; ++j) lse += std::exp(z[j]);
      loss += std::log(lse) - z[b.labels[static_cast<std::size_t>(i)]];
      hits += static_cast<int>(std::max_element(z, z + 4) - z) == b.labels[static_cast<std::size_t>(i)];
    }
    const auto result = model.test_on_batch(b);
    CHECK(result.at("loss") == doctest::Approx(loss / b.valid).epsilon(1e-5));
    CHECK(result.at("accuracy") == doctest::Approx(static_cast<double>(hits) / b.valid));
  }
  CHECK(at == all.size());
  CHECK(model.iterations() == 0);  // neither trains
}

TEST_CASE("get_weights and set_weights go by tensor with names and shapes, as Keras's, and check before writing") {
  using tiny = tf::sequential<tf::input<2>, tf::dense<1>>;
  tf::model<tiny> model{3};
  auto weights = model.get_weights();
  REQUIRE(weights.size() == 2);
  CHECK(weights[0].name == "layers.1.kernel");
  CHECK(weights[0].shape == std::vector<std::int64_t>{2, 1});
  CHECK(weights[0].values.size() == 2);  // not the arena's padded rows
  CHECK(weights[1].name == "layers.1.bias");
  CHECK(weights[1].shape == std::vector<std::int64_t>{1});
  CHECK(weights[0].values[0] == model.parameter("layers.1.kernel")[0]);
  weights[0].values = {0.5f, -2.f};
  weights[1].values = {0.25f};
  model.set_weights(weights);
  CHECK(model.parameter("layers.1.kernel")[1] == -2.f);
  CHECK(model.parameter("layers.1.bias")[0] == 0.25f);
  const std::vector<float> before(model.parameter_region().begin(), model.parameter_region().end());
  auto message = [&](std::vector<tf::weight_tensor> tensors) {
    try {
      model.set_weights(tensors);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto wrong_shape = weights;
  wrong_shape[1].values = {1.f, 2.f};
  wrong_shape[0].values = {9.f, 9.f};  // valid, but nothing may be written when a later tensor is refused
  CHECK(message(wrong_shape).find("tensor 1 (layers.1.bias) holds 2 values; its shape (1,) has 1") != std::string::npos);
  auto renamed = weights;
  renamed[0].name = "layers.1.bias";
  CHECK(message(renamed).find("is named layers.1.bias") != std::string::npos);
  CHECK(message({weights[0]}).find("1 tensors for a model of 2") != std::string::npos);
  auto reshaped = weights;
  reshaped[0].shape = {1, 2};
  CHECK(message(reshaped).find("has shape (1, 2), the model's is (2, 1)") != std::string::npos);
  const std::vector<float> after(model.parameter_region().begin(), model.parameter_region().end());
  CHECK(after == before);
  // Values alone, in order (names and shapes left empty), as Keras takes arrays.
  model.set_weights({{"", {}, {1.f, 2.f}}, {"", {}, {3.f}}});
  CHECK(model.get_weights()[1].values == std::vector<float>{3.f});
}

TEST_CASE("fit's steps_per_epoch, validation_steps and validation data batched at another size") {
  toy_data toy(64), held_out(40);
  auto train = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::batch<16>;
  tf::model<toy_net> model{5};
  model.compile(tf::optimizers::sgd{.learning_rate = 0.1}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::accuracy{});
  // Validation batched at 7 (40 = 5 x 7 + 5) while training batches are 16: the same samples, the same val_loss.
  auto validation = tf::data::from_tensor_slices<tf::shape<8>>(held_out.features, held_out.labels) | tf::data::batch<7>;
  std::vector<double> val_loss, evaluated;
  tf::callbacks::lambda_callback check({.on_epoch_end = [&](int, const tf::logs& l) {
    val_loss.push_back(*l.get("val_loss"));
    auto same = tf::data::from_tensor_slices<tf::shape<8>>(held_out.features, held_out.labels) | tf::data::batch<16>;
    evaluated.push_back(model.evaluate(same).at("loss"));
  }});
  auto history = model.fit(train, {.epochs = 2, .validation_data = validation, .callbacks = {&check}, .verbose = 0,
                                   .steps_per_epoch = 3});
  CHECK(model.iterations() == 6);  // 3 of the 4 batches in each epoch
  REQUIRE(val_loss.size() == 2);
  CHECK(val_loss[1] == doctest::Approx(evaluated[1]).epsilon(1e-6));
  CHECK(history.values.at("val_loss").size() == 2);

  // An endless dataset: steps_per_epoch ends each epoch.
  model.fit(train | tf::data::repeat(), {.epochs = 2, .verbose = 0, .steps_per_epoch = 5});
  CHECK(model.iterations() == 16);

  // validation_steps = 1: only the first validation batch (7 samples) is evaluated.
  val_loss.clear();
  evaluated.clear();
  tf::callbacks::lambda_callback first_batch({.on_epoch_end = [&](int, const tf::logs& l) {
    val_loss.push_back(*l.get("val_loss"));
    for (const auto& b : validation) {
      evaluated.push_back(model.test_on_batch(b).at("loss"));
      break;
    }
  }});
  model.fit(train, {.epochs = 1, .validation_data = validation, .callbacks = {&first_batch}, .verbose = 0,
                    .validation_steps = 1});
  REQUIRE(val_loss.size() == 1);
  CHECK(val_loss[0] == doctest::Approx(evaluated[0]).epsilon(1e-6));
  CHECK_THROWS_WITH_AS(model.fit(train, {.verbose = 0, .steps_per_epoch = 0}),
                       doctest::Contains("steps_per_epoch must be positive"), std::invalid_argument);
}

TEST_CASE("fit's validation_split holds out the last samples, as Keras's, and refuses data whose order changes") {
  toy_data toy(100);  // split 0.2: samples 0..79 train (5 batches of 16), 80..99 validate
  auto data = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::batch<16>;
  tf::model<toy_net> model{5};
  model.compile(tf::optimizers::sgd{.learning_rate = 0.1}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::accuracy{});
  const auto tail = tf::data::from_tensor_slices<tf::shape<8>>(std::vector<float>(toy.features.begin() + 80 * 8, toy.features.end()),
                                                               std::vector<std::int32_t>(toy.labels.begin() + 80, toy.labels.end())) |
                    tf::data::batch<16>;
  const auto history = model.fit(data, {.epochs = 2, .verbose = 0, .validation_split = 0.2});
  CHECK(model.iterations() == 10);
  const auto held_out = model.evaluate(tail);
  CHECK(history["val_loss"][1] == doctest::Approx(held_out.at("loss")).epsilon(1e-6));
  CHECK(history["val_accuracy"][1] == doctest::Approx(held_out.at("accuracy")));
  // Trained on samples 0..79 only: the same as a fit on them alone.
  tf::model<toy_net> head{5};
  head.compile(tf::optimizers::sgd{.learning_rate = 0.1}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
               tf::metrics::accuracy{});
  head.fit(tf::data::from_tensor_slices<tf::shape<8>>(std::vector<float>(toy.features.begin(), toy.features.begin() + 80 * 8),
                                                      std::vector<std::int32_t>(toy.labels.begin(), toy.labels.begin() + 80)) |
               tf::data::batch<16>,
           {.epochs = 2, .verbose = 0});
  CHECK(head.get_weights()[0].values == model.get_weights()[0].values);
  // validation_data overrides it, as in Keras: all 7 batches train.
  model.fit(data, {.validation_data = tail, .verbose = 0, .validation_split = 0.2});
  CHECK(model.iterations() == 17);
  // Refused: a shuffled dataset (epochs differ), an endless one, a fraction outside (0, 1), nothing left to validate.
  auto shuffled = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::shuffle(100, 3) |
                  tf::data::batch<16>;
  CHECK_THROWS_WITH_AS(model.fit(shuffled, {.verbose = 0, .validation_split = 0.2}),
                       doctest::Contains("its epochs 0 and 1 differ"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(model.fit(data | tf::data::repeat(), {.verbose = 0, .steps_per_epoch = 2, .validation_split = 0.2}),
                       doctest::Contains("validation_split needs a finite dataset"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(model.fit(data, {.verbose = 0, .validation_split = 1.0}),
                       doctest::Contains("validation_split is 1.000000; it must lie strictly between 0 and 1"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(model.fit(data, {.verbose = 0, .validation_split = 0.001}),
                       doctest::Contains("leaves none to validate on"), std::invalid_argument);
  CHECK(model.iterations() == 17);
}

TEST_CASE("fit's class_weight weighs each row's loss and gradient by its class, as Keras's") {
  toy_data toy(16);
  auto one_batch = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::batch<16>;
  tf::model<toy_net> model{9};
  model.compile(tf::optimizers::sgd{.learning_rate = 0.1}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const auto z = model.predict(one_batch);  // the logits the step will see (no dropout)
  const std::map<int, float> class_weight{{0, 2.f}, {2, 0.5f}};
  double loss = 0;
  std::vector<double> bias_gradient(4, 0.0);
  for (int i = 0; i < 16; ++i) {
    const int y = toy.labels[static_cast<std::size_t>(i)];
    const double w = y == 0 ? 2.0 : (y == 2 ? 0.5 : 1.0);
    double sum = 0;
    for (int j = 0; j < 4; ++j) sum += std::exp(static_cast<double>(z[static_cast<std::size_t>(i * 4 + j)]));
    loss += w * (std::log(sum) - z[static_cast<std::size_t>(i * 4 + y)]) / 16;
    for (int j = 0; j < 4; ++j)
      bias_gradient[static_cast<std::size_t>(j)] +=
          w * (std::exp(static_cast<double>(z[static_cast<std::size_t>(i * 4 + j)])) / sum - (j == y)) / 16;
  }
  const auto history = model.fit(one_batch, {.verbose = 0, .class_weight = class_weight});
  CHECK(history.values.at("loss")[0] == doctest::Approx(loss).epsilon(1e-5));
  const auto g = model.gradient("layers.3.bias");
  for (int j = 0; j < 4; ++j) CHECK(g[static_cast<std::size_t>(j)] == doctest::Approx(bias_gradient[static_cast<std::size_t>(j)]).epsilon(1e-5));
  // evaluate is not weighted, and the weights hold for that fit only.
  const auto z_after = model.predict(one_batch);
  double unweighted = 0;
  for (int i = 0; i < 16; ++i) {
    double sum = 0;
    for (int j = 0; j < 4; ++j) sum += std::exp(static_cast<double>(z_after[static_cast<std::size_t>(i * 4 + j)]));
    unweighted += (std::log(sum) - z_after[static_cast<std::size_t>(i * 4 + toy.labels[static_cast<std::size_t>(i)])]) / 16;
  }
  CHECK(model.evaluate(one_batch).at("loss") == doctest::Approx(unweighted).epsilon(1e-5));
  CHECK_THROWS_WITH_AS(model.fit(one_batch, {.verbose = 0, .class_weight = {{4, 1.f}}}),
                       doctest::Contains("class_weight names class 4, but the output has classes 0..3"),
                       std::invalid_argument);
}

TEST_CASE("sample weights weigh each row's loss and gradient in fit, and the loss in evaluate, as Keras's") {
  toy_data toy(20);  // batches of 16 and 4
  std::vector<float> weights;
  for (int i = 0; i < 20; ++i) weights.push_back(0.25f * static_cast<float>(i % 5));
  const auto weighted = [&](int n) {
    return tf::data::from_tensor_slices<tf::shape<8>>(std::vector<float>(toy.features.begin(), toy.features.begin() + n * 8),
                                                      std::vector<std::int32_t>(toy.labels.begin(), toy.labels.begin() + n),
                                                      std::vector<float>(weights.begin(), weights.begin() + n)) |
           tf::data::batch<16>;
  };
  tf::model<toy_net> model{9};
  model.compile(tf::optimizers::sgd{.learning_rate = 0.1}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::accuracy{});
  // Keras's sum_over_batch_size: sum of w * loss over the rows, over their count.
  // z: the logits of samples first .. first + n - 1.
  const auto expected = [&](const std::vector<float>& z, int first, int n, std::vector<double>* bias_gradient) {
    double loss = 0;
    for (int i = 0; i < n; ++i) {
      const auto row = static_cast<std::size_t>(i * 4);
      const int y = toy.labels[static_cast<std::size_t>(first + i)];
      const double w = weights[static_cast<std::size_t>(first + i)];
      double sum = 0;
      for (int j = 0; j < 4; ++j) sum += std::exp(static_cast<double>(z[row + static_cast<std::size_t>(j)]));
      loss += w * (std::log(sum) - z[row + static_cast<std::size_t>(y)]) / n;
      if (bias_gradient)
        for (int j = 0; j < 4; ++j)
          (*bias_gradient)[static_cast<std::size_t>(j)] +=
              w * (std::exp(static_cast<double>(z[row + static_cast<std::size_t>(j)])) / sum - (j == y)) / n;
    }
    return loss;
  };
  const auto one_batch = weighted(16);
  const auto z = model.predict(one_batch);
  std::vector<double> bias_gradient(4, 0.0);
  const double loss = expected(z, 0, 16, &bias_gradient);
  CHECK(model.evaluate(one_batch).at("loss") == doctest::Approx(loss).epsilon(1e-5));
  const auto history = model.fit(one_batch, {.verbose = 0});
  CHECK(history.values.at("loss")[0] == doctest::Approx(loss).epsilon(1e-5));
  const auto g = model.gradient("layers.3.bias");
  for (int j = 0; j < 4; ++j)
    CHECK(g[static_cast<std::size_t>(j)] == doctest::Approx(bias_gradient[static_cast<std::size_t>(j)]).epsilon(1e-5));

  // The last partial batch (4 rows) is weighted too: the padding weighs 0 and
  // the mean is over the 4 rows present. Accuracy is not weighted.
  const auto both = weighted(20);
  const auto z_all = model.predict(both);
  const auto tail = std::vector<float>(z_all.begin() + 16 * 4, z_all.end());
  std::vector<double> tail_gradient(4, 0.0);
  expected(tail, 16, 4, &tail_gradient);
  model.train_on_batch([&] {
    tf::data::batch_of<16, tf::data::tensor_value<float, tf::shape<8>>, tf::data::tensor_value<std::int32_t, tf::shape<>>> b;
    auto cursor = both.open(0);
    cursor.next(b);
    cursor.next(b);
    CHECK(b.valid == 4);
    CHECK(b.sample_weights == std::vector<float>{weights[16], weights[17], weights[18], weights[19], 0, 0, 0, 0, 0, 0, 0, 0,
                                                 0, 0, 0, 0});
    return b;
  }());
  const auto tail_g = model.gradient("layers.3.bias");
  CHECK_THROWS_WITH_AS(model.train_on_batch(tf::data::batch_of<16, tf::data::tensor_value<float, tf::shape<8>>,
                                                               tf::data::tensor_value<std::int32_t, tf::shape<>>>{}),
                       doctest::Contains("the batch holds 0 of 16 samples; a step needs at least one"),
                       std::invalid_argument);
  for (int j = 0; j < 4; ++j)
    CHECK(tail_g[static_cast<std::size_t>(j)] == doctest::Approx(tail_gradient[static_cast<std::size_t>(j)]).epsilon(1e-5));

  // Weights of 1 change nothing, bit for bit; the accuracy metric ignores weights.
  tf::model<toy_net> plain{3}, ones{3};
  for (auto* m : {&plain, &ones})
    m->compile(tf::optimizers::adam{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
               tf::metrics::accuracy{});
  const auto plain_history = plain.fit(tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) |
                                           tf::data::batch<16>,
                                       {.epochs = 2, .verbose = 0});
  const auto ones_history =
      ones.fit(tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels, std::vector<float>(20, 1.f)) |
                   tf::data::batch<16>,
               {.epochs = 2, .verbose = 0});
  CHECK(plain_history["loss"] == ones_history["loss"]);
  CHECK(plain_history["accuracy"] == ones_history["accuracy"]);
  CHECK(plain.get_weights()[0].values == ones.get_weights()[0].values);

  // Under mirrored<2> each replica weighs its own rows: the same weights after an epoch.
  tf::model<toy_net> single{6};
  tf::model<toy_net, tf::float32, tf::mirrored<2>> pair{6};
  single.compile(tf::optimizers::sgd{.learning_rate = 0.5}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  pair.compile(tf::optimizers::sgd{.learning_rate = 0.5}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  CHECK(pair.fit(both, {.verbose = 0})["loss"][0] == doctest::Approx(single.fit(both, {.verbose = 0})["loss"][0]).epsilon(1e-5));
  for (std::size_t t = 0; t < 4; ++t)
    for (std::size_t i = 0; i < single.get_weights()[t].values.size(); ++i)
      CHECK(single.get_weights()[t].values[i] == doctest::Approx(pair.get_weights()[t].values[i]).epsilon(1e-4).scale(1.0));

  // Weighted validation data batched at another size keeps its weights: fit's val_loss is evaluate's.
  std::vector<double> val_loss, evaluated;
  tf::callbacks::lambda_callback check({.on_epoch_end = [&](int, const tf::logs& l) {
    val_loss.push_back(*l.get("val_loss"));
    evaluated.push_back(single.evaluate(both).at("loss"));
  }});
  const auto at_seven = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels, weights) | tf::data::batch<7>;
  single.fit(both, {.validation_data = at_seven, .callbacks = {&check}, .verbose = 0});
  REQUIRE(val_loss.size() == 1);
  CHECK(val_loss[0] == doctest::Approx(evaluated[0]).epsilon(1e-6));
  const auto unweighted = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::batch<16>;
  CHECK(val_loss[0] != doctest::Approx(single.evaluate(unweighted).at("loss")).epsilon(1e-3));  // the weights count

  // Refused: a bad weight, a weight count that differs, and class_weight beside sample weights.
  CHECK_THROWS_WITH_AS(tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels, std::vector<float>(20, -1.f)),
                       doctest::Contains("sample_weight[0] is -1.000000; a weight must be finite and not negative"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels, std::vector<float>(19, 1.f)),
                       doctest::Contains("the features hold 20 samples but sample_weight holds 19 weights"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(model.fit(both, {.verbose = 0, .class_weight = {{0, 2.f}}}),
                       doctest::Contains("class_weight and sample weights together"), std::invalid_argument);
  // A weighted_example from map weighs as from_tensor_slices's does.
  auto mapped = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) |
                tf::data::map([](const auto& e) {
                  return tf::data::weighted_example<std::decay_t<decltype(e.features)>, std::decay_t<decltype(e.label)>>{
                      e.features, e.label, e.label[0] == 1 ? 3.f : 1.f};
                }) |
                tf::data::batch<16>;
  tf::data::batch_of<16, tf::data::tensor_value<float, tf::shape<8>>, tf::data::tensor_value<std::int32_t, tf::shape<>>> b;
  auto cursor = mapped.open(0);
  REQUIRE(cursor.next(b));
  for (int r = 0; r < 16; ++r) CHECK(b.sample_weights[static_cast<std::size_t>(r)] == (toy.labels[static_cast<std::size_t>(r)] == 1 ? 3.f : 1.f));
}

TEST_CASE("save_weights and load_weights round-trip every parameter by its Keras-like name") {
  const auto path = temp_path("round_trip.safetensors");
  tf::model<mlp> saved{1}, loaded{2};
  saved.save_weights(path);
  const auto file = tf::io::safetensors_file::read(path);
  const auto* kernel = file.find("layers.2.kernel");
  REQUIRE(kernel != nullptr);
  CHECK(kernel->shape == std::vector<std::int64_t>{784, 32});
  CHECK(kernel->dtype == "F32");
  CHECK(file.find("layers.5.bias") != nullptr);
  CHECK(file.tensors().size() == 4);
  loaded.load_weights(path);
  const auto a = saved.parameter_region(), b = loaded.parameter_region();
  CHECK(std::equal(a.begin(), a.end(), b.begin()));
  std::filesystem::remove(path);
}

TEST_CASE("load_weights refuses a file whose shapes or names differ, and changes nothing") {
  const auto path = temp_path("other_model.safetensors");
  tf::model<tf::sequential<tf::input<28, 28>, tf::flatten, tf::dense<16>, tf::relu, tf::dense<10>>> other{1};
  other.save_weights(path);
  tf::model<mlp> model{3};
  const std::vector<float> before(model.parameter_region().begin(), model.parameter_region().end());
  try {
    model.load_weights(path);
    FAIL("load_weights accepted a file of another model");
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    CHECK(message.find(path.string()) != std::string::npos);
    CHECK(message.find("layers.2.kernel: shape (784, 16) in file, (784, 32) expected") != std::string::npos);
    CHECK(message.find("layers.4.kernel") != std::string::npos);  // in the file, not in this model
  }
  const auto after = model.parameter_region();
  CHECK(std::equal(before.begin(), before.end(), after.begin()));
  std::filesystem::remove(path);
}

TEST_CASE("fit without compile, and labels of the wrong form for the loss, are clear errors") {
  toy_data toy(32);
  auto data = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::batch<16>;
  tf::model<toy_net> model;
  CHECK_THROWS_WITH_AS(model.fit(data), doctest::Contains("call compile"), std::logic_error);
  model.compile(tf::optimizers::sgd{}, tf::losses::categorical_crossentropy{});
  CHECK_THROWS_WITH_AS(model.fit(data), doctest::Contains("takes dense float targets"), std::invalid_argument);
}

TEST_CASE("summary prints Keras's table with every layer and the totals") {
  char buffer[4096] = {};
  std::FILE* out = fmemopen(buffer, sizeof buffer - 1, "w");
  REQUIRE(out != nullptr);
  tf::model<mlp> model;
  model.summary(out);
  std::fclose(out);
  const std::string text = buffer;
  CHECK(text.find("Layer (type)") != std::string::npos);
  CHECK(text.find("layers.2 (dense<32>)") != std::string::npos);
  CHECK(text.find("(None, 784)") != std::string::npos);
  CHECK(text.find("25,120") != std::string::npos);  // 784 * 32 + 32
  CHECK(text.find("Total params: 25,450") != std::string::npos);
}

TEST_CASE("sgd, momentum, nesterov and adam follow Keras's update rules") {
  float w = 1.f, v = 0.f;
  tf::optimizers::sgd{.learning_rate = 0.1f}.rule(1)(w, 2.f, &v);
  CHECK(w == doctest::Approx(0.8f));
  w = 1.f, v = 0.f;
  const auto momentum = tf::optimizers::sgd{.learning_rate = 0.1f, .momentum = 0.9f}.rule(1);
  momentum(w, 2.f, &v);  // v = -0.2, w = 0.8
  momentum(w, 2.f, &v);  // v = -0.18 - 0.2 = -0.38, w = 0.42
  CHECK(v == doctest::Approx(-0.38f));
  CHECK(w == doctest::Approx(0.42f));
  w = 1.f, v = 0.f;
  tf::optimizers::sgd{.learning_rate = 0.1f, .momentum = 0.9f, .nesterov = true}.rule(1)(w, 2.f, &v);  // v = -0.2; w += 0.9 * -0.2 - 0.2
  CHECK(w == doctest::Approx(0.62f));

  // Adam's first step moves every weight by about lr, whatever the gradient's size.
  std::vector<float> weights{1.f, 1.f}, grads{1e-3f, 50.f}, m(2), v2(2);
  float* slots[2] = {m.data(), v2.data()};
  const tf::optimizers::parameter_tensor tensor{0, 2, tf::param_kind::kernel};
  tf::optimizers::update_arguments arguments;
  arguments.weights = weights.data();
  arguments.grads = grads.data();
  arguments.slots = slots;
  arguments.floats = 2;
  arguments.tensors = {&tensor, 1};
  arguments.iteration = 1;
  tf::optimizers::adam{.learning_rate = 0.01f}.update(arguments);
  CHECK(weights[0] == doctest::Approx(0.99f).epsilon(1e-4));
  CHECK(weights[1] == doctest::Approx(0.99f).epsilon(1e-4));
  CHECK(m[1] == doctest::Approx(5.f));
  CHECK(v2[1] == doctest::Approx(2.5f));
}

TEST_CASE("losses give Keras's values") {
  // Logits (0, ln 3): softmax (1/4, 3/4); label 1 -> loss -ln(3/4).
  const float logits[2] = {0.f, std::log(3.f)};
  const std::int32_t label[1] = {1};
  float grad[2], row[1];
  tf::losses::sparse_categorical_crossentropy{.from_logits = true}(logits, label, 1, 2, 1, grad, row);
  CHECK(row[0] == doctest::Approx(-std::log(0.75f)));
  CHECK(grad[0] == doctest::Approx(0.25f));
  CHECK(grad[1] == doctest::Approx(-0.25f));
  // Probabilities are clipped at 1e-7: a zero probability costs -ln(1e-7).
  const float probs[2] = {1.f, 0.f};
  tf::losses::sparse_categorical_crossentropy{}(probs, label, 1, 2, 1, grad, row);
  CHECK(row[0] == doctest::Approx(-std::log(1e-7f)));
  // Padding rows contribute nothing.
  const float two[4] = {0.f, 0.f, 5.f, -5.f};
  const std::int32_t labels2[2] = {0, 1};
  float grad2[4] = {1, 1, 1, 1}, rows2[2] = {1, 1};
  tf::losses::sparse_categorical_crossentropy{.from_logits = true}(two, labels2, 2, 2, 1, grad2, rows2);
  CHECK(rows2[1] == 0.f);
  CHECK(grad2[2] == 0.f);
  CHECK(grad2[3] == 0.f);
  // MSE: mean over the row, mean over rows.
  const float y[2] = {1.f, 3.f}, t[2] = {0.f, 0.f};
  tf::losses::mean_squared_error{}(y, t, 1, 2, 1, grad, row);
  CHECK(row[0] == doctest::Approx(5.f));
  CHECK(grad[1] == doctest::Approx(3.f));
}

TEST_CASE("Philox4x32-10 matches the Random123 known-answer vectors") {
  std::uint32_t out[4];
  tf::philox4x32{0, 0}.generate(0, 0, 0, 0, out);
  CHECK(out[0] == 0x6627e8d5u);
  CHECK(out[1] == 0xe169c58du);
  CHECK(out[2] == 0xbc57ac4cu);
  CHECK(out[3] == 0x9b00dbd8u);
  tf::philox4x32{0xa4093822u, 0x299f31d0u}.generate(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, out);
  CHECK(out[0] == 0xd16cfe09u);
  CHECK(out[1] == 0x94fdccebu);
  CHECK(out[2] == 0x5001e420u);
  CHECK(out[3] == 0x24126ea1u);
  tf::philox4x32{0xffffffffu, 0xffffffffu}.generate(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, out);
  CHECK(out[0] == 0x408f276du);
  CHECK(out[1] == 0x41c83b0eu);
  CHECK(out[2] == 0xa20bc7c6u);
  CHECK(out[3] == 0x6d5451fdu);
}

TEST_CASE("he_normal has Keras's standard deviation and truncation") {
  std::vector<float> w(400 * 100);
  tf::initializers::he_normal::fill<tf::shape<400, 100>>(w.data(), tf::random_stream{1, 0});
  double sum = 0, squares = 0, largest = 0;
  for (float x : w) {
    sum += x;
    squares += double{x} * x;
    largest = std::max(largest, std::fabs(double{x}));
  }
  const double stddev = std::sqrt(squares / w.size() - (sum / w.size()) * (sum / w.size()));
  CHECK(stddev == doctest::Approx(std::sqrt(2.0 / 400)).epsilon(0.02));
  CHECK(largest <= 2 * std::sqrt(2.0 / 400) / 0.87962566103423978 + 1e-6);
}

TEST_CASE("the plan holds one loss value per output row, so sequence outputs fit the arena") {
  // (3, 4) logits per sample: 3 rows, each with its own class id.
  using seq = tf::sequential<tf::input<3, 6>, tf::dense<4>>;
  static_assert(tf::memory_plan<seq, 64>::loss_rows_per_sample == 3);
  static_assert(tf::memory_plan<seq, 64>::total_bytes - tf::memory_plan<seq, 64>::loss_rows_offset >=
                64 * 3 * sizeof(float));
  tf::data::batch_of<64, tf::data::tensor_value<float, tf::shape<3, 6>>, tf::data::tensor_value<std::int32_t, tf::shape<3>>>
      batch;
  for (std::size_t i = 0; i < batch.features.size(); ++i) batch.features[i] = static_cast<float>(i % 5) * 0.1f;
  for (std::size_t i = 0; i < batch.labels.size(); ++i) batch.labels[i] = static_cast<std::int32_t>(i % 4);
  batch.valid = 64;
  tf::model<seq> model{1};
  model.compile(tf::optimizers::sgd{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const double loss = model.train_on_batch(batch);
  CHECK(loss > 0);
  CHECK(loss < 10);
}

// functional<> with named inputs and several outputs: where each input and
// output lies in the packed buffers, a loss per output with weights and
// Keras's logged names, labels matched to outputs by name, predict by
// output, every gradient against finite differences, and mirrored<2>.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <typeflow/typeflow.hpp>

#include "../support/gradient_check.hpp"
#include "../support/reference_json.hpp"

namespace tf = typeflow;
namespace data = typeflow::data;
namespace tf_testing = typeflow::testing;

namespace {

// Two inputs (float features and int32 ids), a layer shared by both
// branches, a concatenation and two outputs.
using two_io = tf::functional<tf::node<"image", tf::input<8>>,                       //
                              tf::node<"ids", tf::typed_input<tf::int32, 2>>,         //
                              tf::node<"emb", tf::embedding<10, 4>, "ids">,           // (2, 4)
                              tf::node<"flat", tf::flatten, "emb">,                   // (8)
                              tf::node<"proj", tf::sequential<tf::dense<6>, tf::tanh>, "image">,
                              tf::node<"proj_ids", tf::shared<"proj">, "flat">,       // proj's weights again
                              tf::node<"both", tf::concatenate<>, "proj", "proj_ids">,  // (12)
                              tf::node<"class", tf::dense<5>, "both">,                //
                              tf::node<"value", tf::dense<2>, "both">,                //
                              tf::outputs<"class", "value">>;

using features = data::record<data::part<"image", data::tensor_value<float, tf::shape<8>>>,
                              data::part<"ids", data::tensor_value<std::int32_t, tf::shape<2>>>>;
using labels = data::record<data::part<"class", data::tensor_value<std::int32_t, tf::shape<>>>,
                            data::part<"value", data::tensor_value<float, tf::shape<2>>>>;
// The same labels, in the other order.
using labels_swapped = data::record<data::part<"value", data::tensor_value<float, tf::shape<2>>>,
                                    data::part<"class", data::tensor_value<std::int32_t, tf::shape<>>>>;

// Sample i: features drawn from a fixed stream; the class is the sign
// pattern of two features, the values two sums, so that the task is learnable.
template <class Labels = labels>
std::vector<data::example<features, Labels>> samples(int n) {
  const tf::random_stream rng{5, 9};
  std::vector<data::example<features, Labels>> out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto& e = out[static_cast<std::size_t>(i)];
    auto& image = e.features.template get<"image">();
    for (std::size_t j = 0; j < 8; ++j) image[j] = 2.f * rng.uniform(static_cast<std::uint64_t>(i * 8) + j) - 1.f;
    auto& ids = e.features.template get<"ids">();
    ids[0] = i % 10;
    ids[1] = (3 * i + 1) % 10;
    e.label.template get<"class">()[0] = (image[0] > 0 ? 1 : 0) + (image[1] > 0 ? 2 : 0) + (ids[0] >= 5 ? 1 : 0);
    e.label.template get<"value">()[0] = image[2] + image[3];
    e.label.template get<"value">()[1] = 0.1f * static_cast<float>(ids[1]) - image[4];
  }
  return out;
}

template <class Labels = labels>
auto dataset(int n) {
  return data::from_values(samples<Labels>(n)) | data::batch<8>;
}

template <class Model, class Optimizer = tf::optimizers::sgd>
void compile_two_losses(Model& net, float learning_rate) {
  net.compile(Optimizer{.learning_rate = learning_rate},
              tf::on_output<"class">(tf::losses::sparse_categorical_crossentropy{.from_logits = true}, 0.7),
              tf::on_output<"value">(tf::losses::mean_squared_error{}, 0.3),
              tf::on_output<"class">(tf::metrics::accuracy{}));
}

}  // namespace

TEST_CASE("a functional network packs its named inputs and its outputs, and says where each lies") {
  using net = typename two_io::template under<tf::float32_policy>;
  using io = tf::network_io<net>;
  static_assert(io::named_inputs && io::packed_outputs);
  static_assert(std::is_same_v<typename net::input_shape_type, tf::shape<10>>);  // 8 + 2 slots
  static_assert(std::is_same_v<typename net::output_shape_type, tf::shape<7>>);  // 5 + 2
  CHECK(io::inputs[0].name == "image");
  CHECK(io::inputs[0].offset == 0);
  CHECK(io::inputs[0].size == 8);
  CHECK(!io::inputs[0].int32);
  CHECK(io::inputs[1].name == "ids");
  CHECK(io::inputs[1].offset == 8);
  CHECK(io::inputs[1].int32);
  CHECK(io::outputs[0].name == "class");
  CHECK(io::outputs[0].classes == 5);
  CHECK(io::outputs[1].name == "value");
  CHECK(io::outputs[1].offset == 5);
  CHECK(io::outputs[1].size == 2);
  // A record packs its parts side by side, int32 bit for bit.
  const auto e = samples(3)[2];
  float row[10];
  e.features.pack(row);
  std::int32_t id = 0;
  std::memcpy(&id, row + 8, 4);
  CHECK(id == 2);
  CHECK(row[3] == e.features.get<"image">()[3]);
}

TEST_CASE("compile with a loss per output: the loss is their weighted sum, logged beside each output's own") {
  tf::model<two_io> net{3};
  compile_two_losses(net, 0.f);
  const auto results = net.evaluate(dataset(40));
  REQUIRE(results.count("class_loss") == 1);
  REQUIRE(results.count("value_loss") == 1);
  REQUIRE(results.count("class_accuracy") == 1);
  CHECK(results.size() == 4);
  CHECK(results.at("loss") ==
        doctest::Approx(0.7 * results.at("class_loss") + 0.3 * results.at("value_loss")).epsilon(1e-6));
  // The outputs' own losses, recomputed from predict's outputs by hand.
  const tf::predictions out = net.predict(dataset(40));
  REQUIRE(out.at("class").size() == 40 * 5);
  REQUIRE(out.at("value").size() == 40 * 2);
  CHECK(out.at("class").shape() == std::vector<std::int64_t>{40, 5});
  CHECK(out.at("value").shape() == std::vector<std::int64_t>{40, 2});
  const auto all = samples(40);
  double squared = 0, cross_entropy = 0, hits = 0;
  for (std::size_t i = 0; i < 40; ++i) {
    const float* v = out.at("value").data() + i * 2;
    const auto& t = all[i].label.get<"value">();
    squared += ((v[0] - t[0]) * (v[0] - t[0]) + (v[1] - t[1]) * (v[1] - t[1])) / 2.0;
    const float* z = out.at("class").data() + i * 5;
    double sum = 0;
    int best = 0;
    for (int k = 0; k < 5; ++k) {
      sum += std::exp(double{z[k]});
      if (z[k] > z[best]) best = k;
    }
    const int y = all[i].label.get<"class">()[0];
    cross_entropy += std::log(sum) - z[y];
    hits += best == y;
  }
  CHECK(results.at("value_loss") == doctest::Approx(squared / 40).epsilon(1e-5));
  CHECK(results.at("class_loss") == doctest::Approx(cross_entropy / 40).epsilon(1e-5));
  CHECK(results.at("class_accuracy") == doctest::Approx(hits / 40));

  // The label record's parts are matched by name: their order does not matter.
  const auto swapped = net.evaluate(dataset<labels_swapped>(40));
  CHECK(swapped.at("loss") == results.at("loss"));
  CHECK(swapped.at("class_accuracy") == results.at("class_accuracy"));
}

TEST_CASE("every gradient of a two-input, two-output graph with a shared layer matches finite differences") {
  tf::model<two_io> net{7};
  compile_two_losses(net, 0.f);
  const auto one_batch = dataset(8);
  auto cursor = one_batch.open(0);
  typename decltype(one_batch)::element_type batch;
  REQUIRE(cursor.next(batch));
  net.train_on_batch(batch);
  // The embedding's rows for ids 0..7 are read; the check samples every tensor.
  CHECK(tf_testing::check_gradients_of(net, one_batch, [](const std::string&) { return true; }) > 30);
}

TEST_CASE("a plain loss and metric given to a two-output network go to every output, as in Keras") {
  tf::model<two_io> net{3};
  // mean_squared_error on both: the class output (5 values) needs dense
  // targets, which the int32 class labels are not: refused by name.
  net.compile(tf::optimizers::sgd{.learning_rate = 0.f}, tf::losses::mean_squared_error{});
  try {
    net.evaluate(dataset(16));
    FAIL("labels of the wrong form were accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("\"class\"") != std::string::npos);
    CHECK(std::string(e.what()).find("float targets") != std::string::npos);
  }
  // A label record without a part for an output with a loss is refused by name.
  using only_class = data::record<data::part<"class", data::tensor_value<std::int32_t, tf::shape<>>>>;
  std::vector<data::example<features, only_class>> partial(8);
  compile_two_losses(net, 0.f);
  try {
    net.evaluate(data::from_values(partial) | data::batch<8>);
    FAIL("labels without the value output's part were accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("output \"value\"") != std::string::npos);
    CHECK(std::string(e.what()).find("they have class") != std::string::npos);
  }
}

TEST_CASE("a two-output network learns both heads, and mirrored<2> trains it like one replica") {
  tf::model<two_io> net{21};
  compile_two_losses<tf::model<two_io>, tf::optimizers::adam>(net, 0.01f);
  const auto train = dataset(256);
  const auto before = net.evaluate(train);
  const auto history = net.fit(train, {.epochs = 20, .verbose = 0});
  const auto after = net.evaluate(train);
  CHECK(history.values.count("class_loss") == 1);
  CHECK(history.values.count("value_loss") == 1);
  CHECK(history.values.count("class_accuracy") == 1);
  CHECK(after.at("class_loss") < 0.6 * before.at("class_loss"));
  CHECK(after.at("value_loss") < 0.6 * before.at("value_loss"));
  CHECK(after.at("class_accuracy") > 0.8);

  tf::model<two_io, tf::float32, tf::mirrored<2>> pair{21};
  tf::model<two_io> one{21};
  compile_two_losses(pair, 0.1f);
  compile_two_losses(one, 0.1f);
  const auto data16 = data::from_values(samples(64)) | data::batch<16>;
  pair.fit(data16, {.epochs = 2, .verbose = 0});
  one.fit(data16, {.epochs = 2, .verbose = 0});
  const auto a = pair.parameter_region();
  const auto b = one.parameter_region();
  REQUIRE(a.size() == b.size());
  double largest = 0;
  for (std::size_t i = 0; i < a.size(); ++i) largest = std::max(largest, double{std::fabs(a[i] - b[i])});
  CHECK(largest < 1e-5);
  CHECK(pair.evaluate(data16).at("value_loss") == doctest::Approx(one.evaluate(data16).at("value_loss")).epsilon(1e-4));

  // Under mixed_bfloat16 both heads learn too.
  tf::model<two_io, tf::mixed_bfloat16> bf16{21};
  compile_two_losses<tf::model<two_io, tf::mixed_bfloat16>, tf::optimizers::adam>(bf16, 0.01f);
  const auto bf16_before = bf16.evaluate(train);
  bf16.fit(train, {.epochs = 10, .verbose = 0});
  const auto bf16_after = bf16.evaluate(train);
  CHECK(bf16_after.at("class_loss") < 0.8 * bf16_before.at("class_loss"));
  CHECK(bf16_after.at("value_loss") < 0.8 * bf16_before.at("value_loss"));
}

TEST_CASE("two inputs, a shared layer and two weighted outputs match PyTorch: the losses and every gradient") {
  const auto reference = tf_testing::read_reference("functional_io.json");
  tf::model<two_io> net{1};
  tf_testing::load_reference_weights(net, reference);
  std::vector<data::example<features, labels>> batch_samples(8);
  for (std::size_t i = 0; i < 8; ++i) {
    auto& e = batch_samples[i];
    for (std::size_t j = 0; j < 8; ++j) e.features.get<"image">()[j] = reference["image"][i * 8 + j].get<float>();
    for (std::size_t j = 0; j < 2; ++j) e.features.get<"ids">()[j] = reference["ids"][i * 2 + j].get<std::int32_t>();
    e.label.get<"class">()[0] = reference["classes"][i].get<std::int32_t>();
    for (std::size_t j = 0; j < 2; ++j) e.label.get<"value">()[j] = reference["targets"][i * 2 + j].get<float>();
  }
  const auto one_batch = data::from_values(batch_samples) | data::batch<8>;
  compile_two_losses(net, 0.f);
  const auto results = net.evaluate(one_batch);
  CHECK(results.at("loss") == doctest::Approx(reference["loss"].get<double>()).epsilon(1e-5));
  CHECK(results.at("class_loss") == doctest::Approx(reference["class_loss"].get<double>()).epsilon(1e-5));
  CHECK(results.at("value_loss") == doctest::Approx(reference["value_loss"].get<double>()).epsilon(1e-5));
  auto cursor = one_batch.open(0);
  typename decltype(one_batch)::element_type batch;
  REQUIRE(cursor.next(batch));
  CHECK(net.train_on_batch(batch) == doctest::Approx(reference["loss"].get<double>()).epsilon(1e-5));
  CHECK(tf_testing::check_reference_gradients(net, reference) == 40 + 48 + 6 + 60 + 5 + 24 + 2);
}

TEST_CASE("zip_named and examples build the same named examples from sources of single tensors") {
  const auto all = samples(24);
  std::vector<data::tensor_value<float, tf::shape<8>>> images;
  std::vector<data::tensor_value<std::int32_t, tf::shape<2>>> ids;
  std::vector<data::tensor_value<std::int32_t, tf::shape<>>> classes;
  std::vector<data::tensor_value<float, tf::shape<2>>> values;
  for (const auto& e : all) {
    images.push_back(e.features.get<"image">());
    ids.push_back(e.features.get<"ids">());
    classes.push_back(e.label.get<"class">());
    values.push_back(e.label.get<"value">());
  }
  // The labels' parts in the other order, and one source longer than the rest.
  values.push_back({});
  auto zipped = data::examples(data::zip_named<"image", "ids">(data::from_values(images), data::from_values(ids)),
                               data::zip_named<"value", "class">(data::from_values(values), data::from_values(classes)));
  static_assert(std::is_same_v<typename decltype(zipped)::element_type, data::example<features, labels_swapped>>);
  CHECK(zipped.cardinality() == 24);
  tf::model<two_io> net{3};
  compile_two_losses(net, 0.f);
  const auto from_zip = net.evaluate(zipped | data::batch<8>);
  const auto direct = net.evaluate(dataset(24));
  CHECK(from_zip.at("loss") == direct.at("loss"));
  CHECK(from_zip.at("class_accuracy") == direct.at("class_accuracy"));
}

// model/functional.hpp's header example: a block (sequential<embedding, flatten>)
// reading an int32 input node.
namespace {
using header_example = tf::functional<tf::node<"title", tf::typed_input<tf::int32, 12>>,
                                      tf::node<"tags", tf::input<12>>,
                                      tf::node<"title_features", tf::sequential<tf::embedding<1000, 16>, tf::flatten>, "title">,
                                      tf::node<"features", tf::concatenate<>, "title_features", "tags">,
                                      tf::node<"priority", tf::dense<1>, "features">,
                                      tf::node<"department", tf::dense<4>, "features">,
                                      tf::outputs<"priority", "department">>;
}  // namespace

TEST_CASE("an embedding first in a block reads an int32 input node, as functional.hpp's header example does") {
  using ticket = data::record<data::part<"title", data::tensor_value<std::int32_t, tf::shape<12>>>,
                              data::part<"tags", data::tensor_value<float, tf::shape<12>>>>;
  using answer = data::record<data::part<"priority", data::tensor_value<float, tf::shape<1>>>,
                              data::part<"department", data::tensor_value<std::int32_t, tf::shape<>>>>;
  std::vector<data::example<ticket, answer>> tickets(64);
  for (int i = 0; i < 64; ++i) {
    auto& t = tickets[static_cast<std::size_t>(i)];
    auto& title = t.features.template get<"title">();
    for (std::size_t j = 0; j < 12; ++j) title[j] = static_cast<std::int32_t>((i * 37 + static_cast<int>(j) * 11) % 1000);
    auto& tags = t.features.template get<"tags">();
    for (std::size_t j = 0; j < 12; ++j) tags[j] = (i + static_cast<int>(j)) % 3 == 0 ? 1.f : 0.f;
    t.label.template get<"priority">()[0] = static_cast<float>(i % 5) / 5.f;
    t.label.template get<"department">()[0] = title[0] % 4;
  }
  tf::model<header_example> net{3};
  net.compile(tf::optimizers::adam{.learning_rate = 0.01f},
              tf::on_output<"priority">(tf::losses::mean_squared_error{}),
              tf::on_output<"department">(tf::losses::sparse_categorical_crossentropy{.from_logits = true}));
  const auto weights = net.get_weights();
  REQUIRE(!weights.empty());
  CHECK(weights[0].shape == std::vector<std::int64_t>{1000, 16});
  const auto train = data::from_values(tickets) | data::batch<16>;
  const double before = net.evaluate(train).at("loss");
  net.fit(train, {.epochs = 30, .verbose = 0});
  CHECK(net.evaluate(train).at("loss") < 0.5 * before);
}

// A whole tiny GPT against PyTorch: logits, loss and every parameter's
// gradient (tests/reference/gpt.json, written by gpt_reference.py), with the
// output projection untied and tied to the token embedding.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include <typeflow/typeflow.hpp>

#include "../support/reference_json.hpp"

namespace tf = typeflow;
using json = nlohmann::json;

namespace {

constexpr int V = 11, T = 6, D = 8, H = 2, B = 2;
using layer_norm = tf::layer_normalization<tf::layer_norm_options{.epsilon = 1e-5f}>;
using block = tf::sequential<tf::residual<layer_norm, tf::causal_self_attention<H>>,
                             tf::residual<layer_norm, tf::dense<4 * D>, tf::gelu, tf::dense<D>>>;
template <class Head>
using tiny_gpt = tf::sequential<tf::typed_input<tf::int32, T>, tf::embedding<V, D>, tf::positional_embedding<T>,
                                tf::repeat<2, block>, layer_norm, Head>;

const json& reference() {
  static const json document = typeflow::testing::read_reference("gpt.json");
  return document;
}

template <class Net>
void check_against_torch(const json& expected) {
  const json& doc = reference();
  const json& params = doc.at("untied").at("params");
  const double rtol = doc.at("relative_tolerance"), atol = doc.at("absolute_tolerance");
  auto close = [&](double actual, double wanted) { return std::fabs(actual - wanted) <= atol + rtol * std::fabs(wanted); };

  tf::model<Net> model{1};
  for (const auto& spec : model.parameter_specs()) {
    INFO("parameter " << spec.name);
    REQUIRE(params.contains(spec.name));
    const auto& values = params.at(spec.name).at("values");
    auto view = model.parameter(spec.name);
    REQUIRE(view.size() == values.size());
    for (std::size_t i = 0; i < view.size(); ++i) view[i] = values[i].template get<float>();
  }
  using ids = tf::data::tensor_value<std::int32_t, tf::shape<T>>;
  tf::data::batch_of<B, ids, ids> batch;
  for (int i = 0; i < B * T; ++i) {
    batch.features[i] = doc.at("tokens").at("values")[i].get<std::int32_t>();
    batch.labels[i] = doc.at("targets").at("values")[i].get<std::int32_t>();
  }
  batch.valid = B;

  auto data = tf::data::from_tensor_slices<tf::shape<T>, tf::shape<T>>(
                  std::vector<std::int32_t>(batch.features.begin(), batch.features.end()),
                  std::vector<std::int32_t>(batch.labels.begin(), batch.labels.end())) |
              tf::data::batch<B>;
  const auto logits = model.predict(data);
  const auto& want_logits = expected.at("logits").at("values");
  REQUIRE(logits.size() == want_logits.size());
  int bad = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) bad += !close(logits[i], want_logits[i].template get<double>());
  CHECK(bad == 0);

  model.compile(tf::optimizers::sgd{.learning_rate = 0.f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const double loss = model.train_on_batch(batch);
  CHECK(close(loss, expected.at("loss").get<double>()));
  int checked = 0;
  for (const auto& spec : model.parameter_specs()) {
    const auto& want = expected.at("grads").at(spec.name).at("values");
    const auto grad = model.gradient(spec.name);
    REQUIRE(grad.size() == want.size());
    int wrong = 0;
    double worst = 0;
    for (std::size_t i = 0; i < grad.size(); ++i) {
      const double w = want[i].template get<double>();
      wrong += !close(grad[i], w);
      worst = std::max(worst, std::fabs(grad[i] - w));
    }
    INFO(spec.name << ": worst absolute difference " << worst);
    CHECK(wrong == 0);
    ++checked;
  }
  CHECK(checked == static_cast<int>(expected.at("grads").size()));
}

}  // namespace

TEST_CASE("a tiny GPT's logits, loss and gradients match PyTorch") {
  check_against_torch<tiny_gpt<tf::dense<V>>>(reference().at("untied"));
}

TEST_CASE("a tiny GPT with the logits tied to the embedding matches PyTorch") {
  check_against_torch<tiny_gpt<tf::tied_logits>>(reference().at("tied"));
}

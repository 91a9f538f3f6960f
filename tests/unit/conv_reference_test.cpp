// conv2d, depthwise_conv2d and the pooling layers against PyTorch
// (tests/reference/conv.json, written by tests/reference/conv_reference.py):
// for each case, the output, every parameter's gradient and the input's
// gradient, through a model as a user builds it.
//
// The gradients come from train_on_batch with sgd at learning rate 0 and
// mean_squared_error, whose gradient with respect to the output is
// 2 (y - t) / N for N = samples x output values per sample (losses.hpp: the
// loss is the mean over rows of each row's mean over its last axis, and
// every row has the same width). With labels t = y - d_out * N / 2, y the
// model's own prediction, that gradient is the fixture's d_out, so each
// parameter's gradient is dL/dparam of the fixture's L = sum(y * d_out).
//
// A model does not expose the gradient of its input, so d_x is read off a
// second net that puts a zero positional_embedding in front of the layer:
//   input<H, W, C>, reshape<H * W, C>, positional_embedding<H * W>,
//   reshape<H, W, C>, LAYER
// With its table at zero the layer sees x unchanged, and the table's
// gradient is d_out of the table summed over the batch, which is the layer's
// d_x; train_on_batch on one sample at a time makes it that sample's d_x,
// element by element.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <typeflow/typeflow.hpp>

#include "../support/reference_json.hpp"

namespace tf = typeflow;
using json = nlohmann::json;

namespace {

const json& reference() {
  static const json document = typeflow::testing::read_reference("conv.json");
  return document;
}

const json& reference_case(const std::string& name) {
  for (const json& c : reference().at("cases"))
    if (c.at("name") == name) return c;
  throw std::runtime_error("conv.json has no case \"" + name + "\"");
}

std::vector<float> values_of(const json& a) {
  std::vector<float> v;
  for (const json& x : a.at("values")) v.push_back(x.get<float>());
  return v;
}

std::vector<std::int64_t> shape_of(const json& a) { return a.at("shape").get<std::vector<std::int64_t>>(); }

// |actual - expected| <= relative * |expected| + absolute, element by
// element; returns the largest absolute difference.
template <class Values>
double check_close(const std::string& what, const Values& actual, const json& expected) {
  const double relative = reference().at("relative_tolerance").get<double>();
  const double absolute = reference().at("absolute_tolerance").get<double>();
  const json& values = expected.at("values");
  REQUIRE(actual.size() == values.size());
  double worst = 0;
  int wrong = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double e = values[i].get<double>(), a = actual[i];
    worst = std::max(worst, std::fabs(a - e));
    if (!(std::fabs(a - e) <= relative * std::fabs(e) + absolute)) {
      // Only the first few, so that a layout bug does not print hundreds.
      if (++wrong <= 5) {
        INFO(what << "[" << i << "]: typeflow " << a << ", PyTorch " << e);
        CHECK(std::fabs(a - e) <= relative * std::fabs(e) + absolute);
      }
    }
  }
  INFO(what << ": " << wrong << " of " << values.size() << " values outside the tolerance");
  CHECK(wrong == 0);
  return worst;
}

template <class Values>
std::vector<float> copy_of(const Values& values) {
  return {values.begin(), values.end()};
}

// Sets "layers.<position>.<name>" from the fixture for every parameter the
// case has, and checks that the layer has exactly those, shaped as Keras's.
template <class Model>
void load_parameters(Model& model, int position, const json& params) {
  const std::string prefix = "layers." + std::to_string(position) + ".";
  int found = 0;
  for (const auto& spec : model.parameter_specs()) {
    if (!spec.name.starts_with(prefix)) continue;
    const std::string name = spec.name.substr(prefix.size());
    INFO("parameter " << spec.name);
    REQUIRE(params.contains(name));
    CHECK(spec.shape == shape_of(params.at(name)));
    const auto values = values_of(params.at(name));
    auto view = model.parameter(spec.name);
    REQUIRE(view.size() == values.size());
    for (std::size_t i = 0; i < values.size(); ++i) view[i] = values[i];
    ++found;
  }
  CHECK(found == static_cast<int>(params.size()));
}

template <class Layer, int H, int W, int C>
void check_against_pytorch(const std::string& case_name) {
  const json& c = reference_case(case_name);
  INFO("case " << case_name << " (" << c.at("typeflow").get<std::string>() << ")");
  constexpr int batch = 2;
  REQUIRE(reference().at("batch") == batch);
  REQUIRE(c.at("input_shape") == json::array({H, W, C}));

  using net = tf::sequential<tf::input<H, W, C>, Layer>;
  using out_shape = typename net::output_shape_type;
  constexpr int out_size = static_cast<int>(out_shape::size);
  REQUIRE(c.at("output_shape").get<std::vector<int>>() ==
          std::vector<int>(out_shape::dims.begin(), out_shape::dims.end()));
  using features = tf::data::tensor_value<float, tf::shape<H, W, C>>;
  using labels = tf::data::tensor_value<float, out_shape>;

  const std::vector<float> x = values_of(c.at("x"));
  const std::vector<float> d_out = values_of(c.at("d_out"));
  REQUIRE(x.size() == std::size_t{batch} * H * W * C);
  REQUIRE(d_out.size() == std::size_t{batch} * out_size);

  // The output.
  tf::model<net> model{1};
  load_parameters(model, 1, c.at("params"));
  const auto data = tf::data::from_tensor_slices<tf::shape<H, W, C>, out_shape>(x, d_out) | tf::data::batch<batch>;
  const std::vector<float> y = model.predict(data);
  // The largest absolute difference from PyTorch, and where.
  double worst = 0;
  std::string worst_in;
  auto note = [&](const std::string& what, double difference) {
    if (difference > worst) worst = difference, worst_in = what;
  };
  note("y", check_close("y", y, c.at("y")));

  // Every parameter's gradient, over both samples.
  model.compile(tf::optimizers::sgd{.learning_rate = 0.f}, tf::losses::mean_squared_error{});
  tf::data::batch_of<batch, features, labels> both;
  std::copy(x.begin(), x.end(), both.features.begin());
  const float half_n = 0.5f * batch * out_size;
  for (std::size_t i = 0; i < both.labels.size(); ++i) both.labels[i] = y[i] - d_out[i] * half_n;
  both.valid = batch;
  model.train_on_batch(both);
  const json& grads = c.at("grads");
  for (const auto& [name, expected] : grads.items())
    note("d " + name, check_close("d " + name, copy_of(model.gradient("layers.1." + name)), expected));

  // d_x, one sample at a time, through a zero positional_embedding's gradient.
  using probe_net = tf::sequential<tf::input<H, W, C>, tf::reshape<H * W, C>, tf::positional_embedding<H * W>,
                                   tf::reshape<H, W, C>, Layer>;
  tf::model<probe_net> probe{1};
  load_parameters(probe, 4, c.at("params"));
  for (float& v : probe.parameter("layers.2.embeddings")) v = 0.f;
  probe.compile(tf::optimizers::sgd{.learning_rate = 0.f}, tf::losses::mean_squared_error{});
  std::vector<float> d_x;
  for (int s = 0; s < batch; ++s) {
    tf::data::batch_of<1, features, labels> one;
    std::copy_n(x.begin() + std::ptrdiff_t{s} * H * W * C, H * W * C, one.features.begin());
    const float half = 0.5f * out_size;
    for (int i = 0; i < out_size; ++i) {
      const std::size_t at = std::size_t(s) * out_size + i;
      one.labels[i] = y[at] - d_out[at] * half;
    }
    one.valid = 1;
    probe.train_on_batch(one);
    const auto g = probe.gradient("layers.2.embeddings");
    REQUIRE(g.size() == std::size_t{H} * W * C);
    d_x.insert(d_x.end(), g.begin(), g.end());
  }
  note("d_x", check_close("d_x", d_x, c.at("d_x")));
  if (worst == 0) MESSAGE(case_name << ": every value is exactly PyTorch's");
  else MESSAGE(case_name << ": the largest absolute difference from PyTorch is " << worst << ", in " << worst_in);
}

}  // namespace

TEST_CASE("conv2d valid 3x3 with bias matches PyTorch: output, gradients and d_x") {
  check_against_pytorch<tf::conv2d<4, 3>, 7, 6, 3>("conv2d valid 3x3, 4 filters, bias");
}

TEST_CASE("conv2d same with a (3, 2) kernel and strides 2 matches PyTorch") {
  check_against_pytorch<tf::conv2d<5, tf::window{3, 2}, 2, tf::padding::same>, 7, 6, 3>(
      "conv2d same, kernel (3, 2), strides 2");
}

TEST_CASE("conv2d valid with dilation 2 and no bias matches PyTorch") {
  check_against_pytorch<tf::conv2d<4, 3, 1, tf::padding::valid, tf::dilation<2>, tf::use_bias<false>>, 8, 7, 3>(
      "conv2d valid 3x3, dilation 2, no bias");
}

TEST_CASE("conv2d same with an even 4x4 kernel pads like Keras, one more after than before") {
  check_against_pytorch<tf::conv2d<3, 4, 1, tf::padding::same>, 7, 6, 3>("conv2d same 4x4 (even kernel), strides 1");
}

TEST_CASE("depthwise_conv2d same with depth multiplier 2 matches PyTorch's grouped convolution") {
  check_against_pytorch<tf::depthwise_conv2d<3, 1, tf::padding::same, tf::depth_multiplier<2>>, 7, 6, 3>(
      "depthwise_conv2d same 3x3, depth multiplier 2");
}

TEST_CASE("max_pooling2d valid pool 2 matches PyTorch, dropping the odd last row") {
  check_against_pytorch<tf::max_pooling2d<2>, 7, 6, 3>("max_pooling2d valid pool 2");
}

TEST_CASE("max_pooling2d same pool 3 strides 2 matches PyTorch") {
  check_against_pytorch<tf::max_pooling2d<3, 2, tf::padding::same>, 7, 6, 3>("max_pooling2d same pool 3, strides 2");
}

TEST_CASE("average_pooling2d same pool 3 strides 2 averages the in-bounds elements only") {
  check_against_pytorch<tf::average_pooling2d<3, 2, tf::padding::same>, 7, 6, 3>(
      "average_pooling2d same pool 3, strides 2");
}

TEST_CASE("global_average_pooling2d matches PyTorch") {
  check_against_pytorch<tf::global_average_pooling2d, 7, 6, 3>("global_average_pooling2d");
}

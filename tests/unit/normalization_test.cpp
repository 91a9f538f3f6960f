// layer_norm and batch_norm: their gradients against finite differences (each
// layer's executor driven directly, on buffers of the test's own), their
// values against PyTorch (tests/reference/normalization.json, written by
// tests/reference/normalization_reference.py), and batch_norm's statistics
// inside a model: trained by the forward pass only, used in inference, saved.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include <typeflow/typeflow.hpp>

#include "../support/bound_layer.hpp"
#include "../support/reference_json.hpp"

namespace tf = typeflow;
using json = nlohmann::json;

namespace {

// A deterministic pseudo-random value in [low, high) for index i.
float wobble(std::uint64_t i, std::uint64_t salt, float low = -1.f, float high = 1.f) {
  return low + (high - low) * tf::random_stream{4321 + salt, 0}.uniform(i);
}

// What a gradient entry holds before backward: a layer must overwrite the
// entries it owns (never accumulate) and leave the statistics' alone.
constexpr float untouched = 12345.f;

template <class Spec, class Sample>
using bound = tf::testing::bound_layer<Spec, Sample, tf::layer_context<1, tf::dense<5>, void>>;

// One bound layer's executor on buffers of its own, as a step_program would
// bind it. With in_place, d_in is d_out's buffer (what the memory plan does
// for a gradient_in_place layer); otherwise they are separate.
template <class Layer, int Batch>
struct layer_harness {
  static constexpr std::size_t in_size = Batch * Layer::input_shape::size;
  static constexpr std::size_t out_size = Batch * Layer::output_shape::size;
  static constexpr int features = Layer::features;

  std::vector<float> in, out, d_out, d_in_storage, params, grads;
  std::vector<std::byte> workspace;
  tf::run_state run{.training = true, .seed = 1, .step = 1};
  tf::executor<typename Layer::spec, Layer, Batch, tf::cpu> executor;

  explicit layer_harness(bool in_place = false)
      : in(in_size),
        out(out_size),
        d_out(out_size),
        d_in_storage(in_place ? 0 : in_size),
        params(Layer::params::floats),
        grads(Layer::params::floats, untouched),
        workspace(Batch * Layer::workspace_bytes_per_sample + Layer::workspace_bytes_per_step),
        executor(io(in_place)) {
    executor.bind(nullptr);
  }

  tf::layer_io<tf::cpu> io(bool in_place) {
    tf::layer_io<tf::cpu> io;
    io.in = in.data();
    io.out = out.data();
    io.d_in = in_place ? d_out.data() : d_in_storage.data();
    io.d_out = d_out.data();
    io.params = params.data();
    io.grads = grads.data();
    io.workspace = workspace.data();
    io.run = &run;
    return io;
  }
  // d_in lives in d_out's buffer when in place.
  std::span<const float> d_in() const { return d_in_storage.empty() ? d_out : d_in_storage; }

  template <std::size_t I>
  float* param_at(std::vector<float>& region) {
    return region.data() + Layer::params::template offset<I>;
  }
  float* gamma() {
    if constexpr (Layer::has_gamma) return param_at<0>(params);
    else return nullptr;
  }
  float* beta() {
    if constexpr (Layer::has_beta) return param_at<Layer::has_gamma ? 1 : 0>(params);
    else return nullptr;
  }
  float* d_gamma() {
    if constexpr (Layer::has_gamma) return param_at<0>(grads);
    else return nullptr;
  }
  float* d_beta() {
    if constexpr (Layer::has_beta) return param_at<Layer::has_gamma ? 1 : 0>(grads);
    else return nullptr;
  }
  float* moving_mean() { return param_at<Layer::moving_mean_index>(params); }
  float* moving_variance() { return param_at<Layer::moving_variance_index>(params); }
  const float* moving_mean_gradient() { return param_at<Layer::moving_mean_index>(grads); }
  const float* moving_variance_gradient() { return param_at<Layer::moving_variance_index>(grads); }

  // The scalar objective L = sum(out * r), r fixed (so that d_out = r).
  double objective(const std::vector<float>& r) {
    executor.forward();
    double sum = 0;
    for (std::size_t i = 0; i < out_size; ++i) sum += double{out[i]} * r[i];
    return sum;
  }
};

// Random inputs, gamma and beta (not the initial ones and zeros, so both
// matter), and the upstream gradient r.
template <class Harness>
std::vector<float> fill_randomly(Harness& h) {
  for (std::size_t i = 0; i < h.in.size(); ++i) h.in[i] = wobble(i, 1, -2.f, 3.f);
  for (int j = 0; j < Harness::features; ++j) {
    if (h.gamma()) h.gamma()[j] = wobble(j, 2, 0.5f, 1.5f);
    if (h.beta()) h.beta()[j] = wobble(j, 3);
  }
  std::vector<float> r(h.out.size());
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = wobble(i, 4);
  return r;
}

// Checks d_in, d_gamma and d_beta after one forward and backward against
// central differences (L(v + h) - L(v - h)) / 2h of L = sum(out * r).
//
// Tolerance, in float32: the objective sums up to 60 outputs of size ~1,
// each rounded to ~6e-8 relative, so L carries up to ~1e-6 of rounding noise
// and the difference quotient up to ~1e-6 / (2h) = 1e-4 at h = 5e-3; the
// truncation error h^2 / 6 * L''' is smaller. Observed differences stay
// below 1e-4 (the test prints the largest); the check allows 5e-4 plus 2e-3
// relative. Scaling one term of either layer's d_in formula by 0.98 fails
// every case.
template <class Harness>
void check_against_finite_differences(Harness& h) {
  const std::vector<float> r = fill_randomly(h);
  std::copy(r.begin(), r.end(), h.d_out.begin());
  h.executor.forward();
  h.executor.backward();
  const std::vector<float> d_in(h.d_in().begin(), h.d_in().end());
  std::vector<float> d_gamma, d_beta;
  if (h.gamma()) d_gamma.assign(h.d_gamma(), h.d_gamma() + Harness::features);
  if (h.beta()) d_beta.assign(h.d_beta(), h.d_beta() + Harness::features);

  constexpr float step = 5e-3f;
  double largest = 0;
  int checked = 0;
  auto check = [&](const char* what, float& value, std::size_t i, float analytic) {
    const float original = value;
    value = original + step;
    const double up = h.objective(r);
    value = original - step;
    const double down = h.objective(r);
    value = original;
    const double numeric = (up - down) / (2.0 * double{step});
    largest = std::max(largest, std::fabs(analytic - numeric));
    INFO(std::string(what) << "[" << i << "]: analytic " << analytic << ", numeric " << numeric);
    CHECK(std::fabs(analytic - numeric) <= 5e-4 + 2e-3 * std::fabs(numeric));
    ++checked;
  };
  for (std::size_t i = 0; i < h.in.size(); ++i) check("d_in", h.in[i], i, d_in[i]);
  for (int j = 0; j < Harness::features; ++j) {
    if (h.gamma()) check("d_gamma", h.gamma()[j], j, d_gamma[j]);
    if (h.beta()) check("d_beta", h.beta()[j], j, d_beta[j]);
  }
  MESSAGE("largest |analytic - numeric| over " << checked << " derivatives: " << largest);
  CHECK(checked == static_cast<int>(h.in.size()) + Harness::features * (int{h.gamma() != nullptr} + int{h.beta() != nullptr}));
}

const json& reference() {
  static const json document = typeflow::testing::read_reference("normalization.json");
  return document;
}

const json& reference_case(const char* layer, const std::vector<int>& shape) {
  for (const json& c : reference().at(layer))
    if (c.at("input_shape").get<std::vector<int>>() == shape) return c;
  throw std::runtime_error(std::string("normalization.json has no ") + layer + " case of that shape");
}

void load(const json& values, float* into, std::size_t count) {
  REQUIRE(values.size() == count);
  for (std::size_t i = 0; i < count; ++i) into[i] = values[i].get<float>();
}

// |actual - expected| <= relative * |expected| + absolute, element by element.
void check_close(const char* what, const float* actual, const json& expected, std::size_t count) {
  const double relative = reference().at("relative_tolerance").get<double>();
  const double absolute = reference().at("absolute_tolerance").get<double>();
  REQUIRE(expected.size() == count);
  for (std::size_t i = 0; i < count; ++i) {
    const double e = expected[i].get<double>();
    INFO(std::string(what) << "[" << i << "]: typeflow " << actual[i] << ", PyTorch " << e);
    CHECK(std::fabs(actual[i] - e) <= relative * std::fabs(e) + absolute);
  }
}

template <class Layer, int Batch>
void check_layer_norm_against_pytorch(const json& c) {
  layer_harness<Layer, Batch> h;
  constexpr std::size_t n = Layer::features;
  load(c.at("x"), h.in.data(), h.in.size());
  load(c.at("gamma"), h.gamma(), n);
  load(c.at("beta"), h.beta(), n);
  load(c.at("d_out"), h.d_out.data(), h.d_out.size());
  h.executor.forward();
  check_close("y", h.out.data(), c.at("y"), h.out.size());
  h.executor.backward();
  check_close("d_in", h.d_in().data(), c.at("d_in"), h.in.size());
  check_close("d_gamma", h.d_gamma(), c.at("d_gamma"), n);
  check_close("d_beta", h.d_beta(), c.at("d_beta"), n);
}

template <class Layer, int Batch>
void check_batch_norm_against_pytorch(const json& c) {
  layer_harness<Layer, Batch> h;
  constexpr std::size_t n = Layer::features;
  load(c.at("x"), h.in.data(), h.in.size());
  load(c.at("gamma"), h.gamma(), n);
  load(c.at("beta"), h.beta(), n);
  load(c.at("moving_mean"), h.moving_mean(), n);
  load(c.at("moving_variance"), h.moving_variance(), n);
  load(c.at("d_out"), h.d_out.data(), h.d_out.size());

  h.run.training = true;
  h.executor.forward();
  check_close("y", h.out.data(), c.at("y"), h.out.size());
  check_close("moving_mean", h.moving_mean(), c.at("keras_moving_mean"), n);
  check_close("moving_variance", h.moving_variance(), c.at("keras_moving_variance"), n);
  // The mean's rule is also torch's; the variance's is not (torch's running
  // variance takes the unbiased batch variance): the JSON records both.
  check_close("moving_mean vs torch", h.moving_mean(), c.at("torch_running_mean"), n);
  for (std::size_t j = 0; j < n; ++j) {
    const double torch_var = c.at("torch_running_var")[j].get<double>();
    CHECK(std::fabs(h.moving_variance()[j] - torch_var) > 1e-4 * torch_var);
  }
  h.executor.backward();
  check_close("d_in", h.d_in().data(), c.at("d_in"), h.in.size());
  check_close("d_gamma", h.d_gamma(), c.at("d_gamma"), n);
  check_close("d_beta", h.d_beta(), c.at("d_beta"), n);
  for (std::size_t j = 0; j < n; ++j) {
    CHECK(h.moving_mean_gradient()[j] == untouched);
    CHECK(h.moving_variance_gradient()[j] == untouched);
  }

  // Inference from the starting moving statistics, which stay as they are.
  load(c.at("moving_mean"), h.moving_mean(), n);
  load(c.at("moving_variance"), h.moving_variance(), n);
  const std::vector<float> statistics_before(h.params);
  h.run.training = false;
  h.executor.forward();
  check_close("inference y", h.out.data(), c.at("inference_y"), h.out.size());
  CHECK(h.params == statistics_before);
}

// A toy problem for the model-level tests: class c lights up feature c.
struct toy_data {
  std::vector<float> features;
  std::vector<std::int32_t> labels;
  explicit toy_data(int samples) {
    for (int i = 0; i < samples; ++i) {
      const int c = (i * 7) % 3;
      for (int j = 0; j < 5; ++j) features.push_back((j == c ? 2.f : 0.f) + wobble(i * 5 + j, 9) + 0.5f);
      labels.push_back(c);
    }
  }
};

using bn_net = tf::sequential<tf::input<5>, tf::dense<8>, tf::batch_norm, tf::relu, tf::dense<3>>;

template <class View>
std::vector<float> copy_of(const View& values) { return {values.begin(), values.end()}; }

// toy's samples first .. first + N - 1 as one batch of N.
template <int N>
auto batch_of_rows(const toy_data& toy, int first) {
  tf::data::batch_of<N, tf::data::tensor_value<float, tf::shape<5>>, tf::data::tensor_value<std::int32_t, tf::shape<>>> b;
  std::copy_n(toy.features.begin() + first * 5, N * 5, b.features.begin());
  std::copy_n(toy.labels.begin() + first, N, b.labels.begin());
  b.valid = N;
  return b;
}

}  // namespace

TEST_CASE("normalization layers state their shapes, parameters and names at compile time") {
  using bn = tf::sequential<tf::input<5>, tf::batch_norm>;
  static_assert(bn::output_shape == tf::shape<5>{});
  static_assert(bn::parameter_count == 4 * 5);
  static_assert(bn::layer<1>::params::trainable_count == 2 * 5);
  static_assert(bn::layer<1>::gradient_in_place && !bn::layer<1>::output_aliases_input);
  // Over a rank-2 sample the statistics are per feature of the last axis.
  using bn_positions = tf::sequential<tf::input<3, 5>, tf::batch_norm>;
  static_assert(bn_positions::output_shape == tf::shape<3, 5>{});
  static_assert(bn_positions::parameter_count == 4 * 5);
  using bn_no_affine = tf::sequential<tf::input<5>, tf::batch_normalization<{.center = false, .scale = false}>>;
  static_assert(bn_no_affine::parameter_count == 2 * 5 && bn_no_affine::layer<1>::params::trainable_count == 0);

  using ln = tf::sequential<tf::input<3, 5>, tf::layer_norm>;
  static_assert(ln::output_shape == tf::shape<3, 5>{});
  static_assert(ln::parameter_count == 2 * 5 && ln::layer<1>::params::trainable_count == 2 * 5);
  static_assert(ln::layer<1>::workspace_bytes_per_sample == 3 * 2 * sizeof(float));  // (mean, 1/std) per row
  // batch_norm's batch statistics do not grow with the batch.
  static_assert(bn_positions::layer<1>::workspace_bytes_per_step == 2 * 5 * sizeof(float) &&
                bn_positions::layer<1>::workspace_bytes_per_sample == 0);
  static_assert(tf::memory_plan<bn_positions, 64>::workspace_bytes(1) == 64);
  using ln_scale_only = tf::sequential<tf::input<5>, tf::layer_normalization<{.center = false}>>;
  static_assert(ln_scale_only::parameter_count == 5);

  using mlp = tf::sequential<tf::input<5>, tf::dense<8>, tf::batch_norm, tf::relu, tf::dense<3>>;
  static_assert(mlp::output_shape == tf::shape<3>{});
  static_assert(mlp::parameter_count == 5 * 8 + 8 + 4 * 8 + 8 * 3 + 3);
  // Neither the dense before nor the relu after fuses across the normalization.
  static_assert(mlp::layer<1>::fused == tf::epilogue::none && !mlp::layer<3>::fused);

  CHECK(tf::layer_norm::type_name() == "layer_norm");
  CHECK(tf::layer_normalization<{.epsilon = 1e-5f}>::type_name() == "layer_norm<eps=1e-05>");
  CHECK(tf::layer_normalization<{.center = false}>::type_name() == "layer_norm<center=false>");
  CHECK(tf::batch_norm::type_name() == "batch_norm");
  CHECK(tf::batch_normalization<{.momentum = 0.9f, .epsilon = 1e-5f}>::type_name() ==
        "batch_norm<momentum=0.9, eps=1e-05>");
  CHECK(tf::batch_normalization<{.scale = false}>::type_name() == "batch_norm<scale=false>");
  CHECK(mlp::layer_type_name<2>() == "batch_norm");
}

TEST_CASE_TEMPLATE("layer_norm's d_in, d_gamma and d_beta match finite differences", Layer,
                   bound<tf::layer_norm, tf::shape<5>>, bound<tf::layer_norm, tf::shape<3, 5>>,
                   bound<tf::layer_normalization<{.center = false}>, tf::shape<5>>,
                   bound<tf::layer_normalization<{.scale = false}>, tf::shape<5>>) {
  layer_harness<Layer, 4> h;
  check_against_finite_differences(h);
}

TEST_CASE_TEMPLATE("batch_norm's training-mode d_in, d_gamma and d_beta match finite differences", Layer,
                   bound<tf::batch_norm, tf::shape<5>>, bound<tf::batch_norm, tf::shape<3, 5>>,
                   bound<tf::batch_norm, tf::shape<2, 3, 5>>,  // an (H, W, C) image: per channel

                   bound<tf::batch_normalization<{.center = false}>, tf::shape<5>>,
                   bound<tf::batch_normalization<{.scale = false}>, tf::shape<5>>) {
  layer_harness<Layer, 4> h;
  h.run.training = true;
  check_against_finite_differences(h);
  // No gradient for the statistics: their entries are exactly as they were.
  for (int j = 0; j < Layer::features; ++j) {
    CHECK(h.moving_mean_gradient()[j] == untouched);
    CHECK(h.moving_variance_gradient()[j] == untouched);
  }
}

TEST_CASE_TEMPLATE("the gradient is the same whether d_in has its own buffer or is d_out's", Layer,
                   bound<tf::layer_norm, tf::shape<3, 5>>, bound<tf::batch_norm, tf::shape<3, 5>>) {
  layer_harness<Layer, 4> separate, in_place(true);
  for (auto* h : {&separate, &in_place}) {
    const std::vector<float> r = fill_randomly(*h);
    std::copy(r.begin(), r.end(), h->d_out.begin());
    h->executor.forward();
    h->executor.backward();
  }
  CHECK(std::ranges::equal(separate.d_in(), in_place.d_in()));
  CHECK(separate.grads == in_place.grads);
}

// Large enough to split over threads (Batch * size >= parallel_threshold),
// with 160 features: two full blocks of 64 and a partial one; layer_norm also
// with 165, whose row sums end in 5 features after 20 groups of 8 lanes.
TEST_CASE_TEMPLATE("over threads and partial feature blocks, both layers match a float64 computation", Layer,
                   bound<tf::layer_norm, tf::shape<32, 160>>, bound<tf::layer_norm, tf::shape<32, 165>>,
                   bound<tf::batch_norm, tf::shape<32, 160>>) {
  constexpr int batch = 8, n = Layer::input_shape::template dim<1>, rows = batch * 32;
  static_assert(batch * Layer::input_shape::size >= tf::parallel_threshold);
  layer_harness<Layer, batch> h;
  const std::vector<float> r = fill_randomly(h);
  std::copy(r.begin(), r.end(), h.d_out.begin());
  h.executor.forward();
  h.executor.backward();

  // The same formulas in float64: normalise within groups of elements (a row
  // of n for layer_norm, a feature column of `rows` for batch_norm).
  constexpr bool per_row = !std::is_same_v<Layer, bound<tf::batch_norm, tf::shape<32, 160>>>;
  constexpr int groups = per_row ? rows : n, group_size = per_row ? n : rows;
  auto at = [](int group, int k) { return per_row ? group * n + k : k * n + group; };
  auto feature = [](int group, int k) { return per_row ? k : group; };
  std::vector<double> y(h.out.size()), d_in(h.in.size()), d_gamma(n, 0.0), d_beta(n, 0.0);
  for (int g = 0; g < groups; ++g) {
    double mean = 0, variance = 0, sum_g = 0, sum_g_normalized = 0;
    for (int k = 0; k < group_size; ++k) mean += h.in[at(g, k)] / double{group_size};
    for (int k = 0; k < group_size; ++k) variance += std::pow(h.in[at(g, k)] - mean, 2) / group_size;
    const double inverse_std = 1 / std::sqrt(variance + 1e-3);
    for (int k = 0; k < group_size; ++k) {
      const int i = at(g, k), j = feature(g, k);
      const double normalized = (h.in[i] - mean) * inverse_std;
      y[i] = h.gamma()[j] * normalized + h.beta()[j];
      d_gamma[j] += r[i] * normalized;
      d_beta[j] += r[i];
      sum_g += r[i] * h.gamma()[j];
      sum_g_normalized += r[i] * h.gamma()[j] * normalized;
    }
    for (int k = 0; k < group_size; ++k) {
      const int i = at(g, k), j = feature(g, k);
      const double normalized = (h.in[i] - mean) * inverse_std;
      d_in[i] = inverse_std * (r[i] * h.gamma()[j] - sum_g / group_size - normalized * sum_g_normalized / group_size);
    }
  }
  auto largest_difference = [](const float* actual, const std::vector<double>& expected) {
    double largest = 0;
    for (std::size_t i = 0; i < expected.size(); ++i)
      largest = std::max(largest, std::fabs(actual[i] - expected[i]) / (1 + std::fabs(expected[i])));
    return largest;
  };
  CHECK(largest_difference(h.out.data(), y) < 1e-5);
  CHECK(largest_difference(h.d_in().data(), d_in) < 1e-5);
  CHECK(largest_difference(h.d_gamma(), d_gamma) < 1e-5);
  CHECK(largest_difference(h.d_beta(), d_beta) < 1e-5);
}

TEST_CASE("layer_norm matches PyTorch's layer_norm: outputs and gradients") {
  check_layer_norm_against_pytorch<bound<tf::layer_norm, tf::shape<5>>, 4>(reference_case("layer_norm", {4, 5}));
  check_layer_norm_against_pytorch<bound<tf::layer_norm, tf::shape<3, 5>>, 4>(
      reference_case("layer_norm", {4, 3, 5}));
}

TEST_CASE("batch_norm matches PyTorch in training and inference, with Keras's moving statistics") {
  check_batch_norm_against_pytorch<bound<tf::batch_norm, tf::shape<5>>, 4>(reference_case("batch_norm", {4, 5}));
  check_batch_norm_against_pytorch<bound<tf::batch_norm, tf::shape<3, 5>>, 4>(
      reference_case("batch_norm", {4, 3, 5}));
}

TEST_CASE("batch_norm in inference normalises with the moving statistics and leaves them unchanged") {
  using layer = bound<tf::batch_normalization<{.momentum = 0.5f, .epsilon = 1e-2f}>, tf::shape<5>>;
  layer_harness<layer, 4> h;
  fill_randomly(h);
  for (int j = 0; j < 5; ++j) {
    h.moving_mean()[j] = wobble(j, 5);
    h.moving_variance()[j] = wobble(j, 6, 0.5f, 2.f);
  }
  const std::vector<float> params_before(h.params);
  h.run.training = false;
  h.executor.forward();
  CHECK(h.params == params_before);
  for (int s = 0; s < 4; ++s)
    for (int j = 0; j < 5; ++j) {
      const double expected = h.gamma()[j] * (h.in[s * 5 + j] - double{h.moving_mean()[j]}) /
                                  std::sqrt(double{h.moving_variance()[j]} + 1e-2) +
                              h.beta()[j];
      CHECK(h.out[s * 5 + j] == doctest::Approx(expected).epsilon(1e-6));
    }

  // Training uses the batch's statistics and moves the moving ones by the momentum.
  h.run.training = true;
  h.executor.forward();
  for (int j = 0; j < 5; ++j) {
    double mean = 0, variance = 0;
    for (int s = 0; s < 4; ++s) mean += h.in[s * 5 + j] / 4.0;
    for (int s = 0; s < 4; ++s) variance += (h.in[s * 5 + j] - mean) * (h.in[s * 5 + j] - mean) / 4.0;
    CHECK(h.moving_mean()[j] == doctest::Approx(params_before[layer::params::offset<2> + j] * 0.5 + mean * 0.5));
    CHECK(h.moving_variance()[j] ==
          doctest::Approx(params_before[layer::params::offset<3> + j] * 0.5 + variance * 0.5));
  }
}

TEST_CASE("in a model, fit moves batch_norm's statistics by Keras's rule and never gives them a gradient") {
  toy_data toy(64);
  const auto data = tf::data::from_tensor_slices<tf::shape<5>>(toy.features, toy.labels) | tf::data::batch<16>;
  tf::model<bn_net> model{5};
  // Weight decay applies to every kind but statistics: they must still follow the rule exactly.
  model.compile(tf::optimizers::adam{.learning_rate = 1e-2f, .weight_decay = 0.5f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true}, tf::metrics::accuracy{});

  // One step: moving_mean = 0 * 0.99 + mean * 0.01 over the dense's outputs
  // for this batch (with the kernel and bias from before the step).
  tf::data::batch_of<16, tf::data::tensor_value<float, tf::shape<5>>, tf::data::tensor_value<std::int32_t, tf::shape<>>>
      batch;
  std::copy_n(toy.features.begin(), 16 * 5, batch.features.begin());
  std::copy_n(toy.labels.begin(), 16, batch.labels.begin());
  batch.valid = 16;
  const auto kernel = copy_of(model.parameter("layers.1.kernel"));  // (5, 8)
  const auto bias = copy_of(model.parameter("layers.1.bias"));
  model.train_on_batch(batch);
  for (int u = 0; u < 8; ++u) {
    std::vector<double> h(16);
    double mean = 0, variance = 0;
    for (int s = 0; s < 16; ++s) {
      h[s] = bias[u];
      for (int i = 0; i < 5; ++i) h[s] += double{batch.features[s * 5 + i]} * kernel[i * 8 + u];
      mean += h[s] / 16;
    }
    for (int s = 0; s < 16; ++s) variance += (h[s] - mean) * (h[s] - mean) / 16;
    CHECK(model.parameter("layers.2.moving_mean")[u] == doctest::Approx(0.01 * mean).epsilon(1e-6));
    CHECK(model.parameter("layers.2.moving_variance")[u] == doctest::Approx(0.99 + 0.01 * variance).epsilon(1e-6));
  }

  model.fit(data, {.epochs = 2, .verbose = 0});
  const auto moving_mean = copy_of(model.parameter("layers.2.moving_mean"));
  const auto moving_variance = copy_of(model.parameter("layers.2.moving_variance"));
  CHECK(std::ranges::none_of(moving_mean, [](float m) { return m == 0.f; }));
  CHECK(std::ranges::none_of(moving_variance, [](float v) { return v == 1.f; }));
  CHECK(std::ranges::all_of(model.gradient("layers.2.moving_mean"), [](float g) { return g == 0.f; }));
  CHECK(std::ranges::all_of(model.gradient("layers.2.moving_variance"), [](float g) { return g == 0.f; }));
  CHECK(std::ranges::any_of(model.gradient("layers.2.gamma"), [](float g) { return g != 0.f; }));

  // evaluate and predict use the statistics and change nothing.
  const auto region = copy_of(model.parameter_region());
  const auto first = model.evaluate(data);
  const auto predictions = model.predict(data);
  CHECK(copy_of(model.parameter_region()) == region);
  CHECK(model.evaluate(data).at("loss") == first.at("loss"));
  CHECK(model.predict(data) == predictions);

  // save_weights carries the statistics; load_weights restores them.
  const auto path = std::filesystem::temp_directory_path() / "typeflow_normalization_test.safetensors";
  model.save_weights(path);
  tf::model<bn_net> loaded{99};
  CHECK(copy_of(loaded.parameter("layers.2.moving_mean")) != moving_mean);
  loaded.load_weights(path);
  std::filesystem::remove(path);
  CHECK(copy_of(loaded.parameter("layers.2.moving_mean")) == moving_mean);
  CHECK(copy_of(loaded.parameter("layers.2.moving_variance")) == moving_variance);
  CHECK(copy_of(loaded.parameter_region()) == region);
  CHECK(loaded.predict(data) == predictions);
}

TEST_CASE("a last partial batch trains batch_norm over its valid samples only, as a batch of just them would") {
  toy_data toy(13);  // batch<8>: 8, then a partial batch of 5
  tf::model<bn_net> partial{5}, separate{5};
  for (auto* m : {&partial, &separate})
    m->compile(tf::optimizers::sgd{.learning_rate = 0.1f}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const auto history = partial.fit(tf::data::from_tensor_slices<tf::shape<5>>(toy.features, toy.labels) | tf::data::batch<8>,
                                   {.verbose = 0});
  CHECK(partial.iterations() == 2);
  const double first = separate.train_on_batch(batch_of_rows<8>(toy, 0));
  const double second = separate.train_on_batch(batch_of_rows<5>(toy, 8));
  CHECK(history["loss"][0] == doctest::Approx((8 * first + 5 * second) / 13).epsilon(1e-5));
  const auto a = copy_of(partial.parameter_region()), b = copy_of(separate.parameter_region());
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-5).scale(1e-6));
  // The moving statistics moved twice, the second time by the 5 samples' statistics.
  CHECK(copy_of(partial.parameter("layers.2.moving_mean")) != std::vector<float>(8, 0.f));
}

TEST_CASE("mirrored<2, sync_batch_norm_statistics>: a last partial batch on replica 0 alone moves the statistics by its samples") {
  toy_data toy(11);  // batch<8>, 4 samples a replica: 8, then 3, all on replica 0
  using synced = tf::mirrored<2, tf::sync_batch_norm_statistics>;
  tf::model<bn_net, tf::float32, synced> fitted{5}, first_step{5};
  tf::model<bn_net> single{5};
  const auto compile = [](auto& m) {
    m.compile(tf::optimizers::sgd{.learning_rate = 0.1f}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  };
  compile(fitted);
  compile(first_step);
  compile(single);
  fitted.fit(tf::data::from_tensor_slices<tf::shape<5>>(toy.features, toy.labels) | tf::data::batch<8>, {.verbose = 0});
  CHECK(fitted.iterations() == 2);
  // The same first step; then the 3 samples alone on one device, from its weights and statistics.
  first_step.train_on_batch(batch_of_rows<8>(toy, 0));
  const auto path = std::filesystem::temp_directory_path() / "typeflow_sync_statistics_test.safetensors";
  first_step.save_weights(path);
  single.load_weights(path);
  std::filesystem::remove(path);
  single.train_on_batch(batch_of_rows<3>(toy, 8));
  // Replica 1, without samples, kept the statistics it had: a plain mean
  // would have moved them half as far.
  for (const char* name : {"layers.2.moving_mean", "layers.2.moving_variance"}) {
    const auto a = copy_of(fitted.parameter(name)), b = copy_of(single.parameter(name));
    const auto before = copy_of(first_step.parameter(name));
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      CAPTURE(name);
      CAPTURE(i);
      CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-5).scale(1e-6));
      CHECK(a[i] != before[i]);
    }
  }
  const auto a = copy_of(fitted.parameter_region()), b = copy_of(single.parameter_region());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-5).scale(1e-6));
}

TEST_CASE("a model with layer_norm trains and its loss falls") {
  toy_data toy(64);
  const auto data = tf::data::from_tensor_slices<tf::shape<5>>(toy.features, toy.labels) | tf::data::batch<16>;
  tf::model<tf::sequential<tf::input<5>, tf::dense<8>, tf::layer_norm, tf::relu, tf::dense<3>>> model{5};
  model.compile(tf::optimizers::adam{.learning_rate = 1e-2f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const double before = model.evaluate(data).at("loss");
  model.fit(data, {.epochs = 10, .verbose = 0});
  CHECK(model.evaluate(data).at("loss") < 0.5 * before);
}

TEST_CASE("summary counts batch_norm's statistics as non-trainable parameters") {
  char buffer[4096] = {};
  std::FILE* out = fmemopen(buffer, sizeof buffer - 1, "w");
  REQUIRE(out != nullptr);
  tf::model<bn_net> model;
  model.summary(out);
  std::fclose(out);
  const std::string text = buffer;
  INFO(text);
  CHECK(text.find("layers.2 (batch_norm)") != std::string::npos);
  CHECK(text.find("Total params: 107") != std::string::npos);  // 48 + 32 + 27
  CHECK(text.find("Trainable params: 91") != std::string::npos);
  CHECK(text.find("Non-trainable params: 16") != std::string::npos);  // moving mean and variance of 8
}

// The GPU's batch_norm kernels (backend/cuda/kernels/batch_norm.cuh) replayed
// on the host: each feature summed in double over chunks of rows
// (batch_norm_math::chunking_of), the chunks then in order, the same
// per-element functions as the CPU layer. Against the CPU executor, which
// sums each feature over all rows in one go: the statistics agree to double
// rounding, so every output, gradient and moving statistic to float's.
TEST_CASE("batch_norm on the GPU: its chunked sums, replayed, give the CPU layer's results, in a partial batch too") {
  namespace bm = tf::batch_norm_math;
  using layer = bound<tf::batch_normalization<{.momentum = 0.9f}>, tf::shape<6, 7, 5>>;  // 42 rows a sample
  constexpr int batch = 7, rows = batch * 42, n = 5;
  // All 7 samples, a last partial batch's 5, and a replica's share of none.
  for (const int valid_samples : {-1, 5, 0}) {
    INFO("valid samples " << valid_samples);
    layer_harness<layer, batch> cpu(true);
    cpu.run.valid_samples = valid_samples;
    for (std::size_t i = 0; i < cpu.in.size(); ++i) cpu.in[i] = wobble(i, 1, -2.f, 3.f);
    for (std::size_t i = 0; i < cpu.d_out.size(); ++i) cpu.d_out[i] = wobble(i, 2);
    for (int j = 0; j < n; ++j) {
      cpu.gamma()[j] = wobble(j, 3, 0.5f, 1.5f);
      cpu.beta()[j] = wobble(j, 4);
      cpu.moving_mean()[j] = wobble(j, 5);
      cpu.moving_variance()[j] = wobble(j, 6, 0.5f, 2.f);
    }
    const std::vector<float> x = cpu.in, dy = cpu.d_out, gamma(cpu.gamma(), cpu.gamma() + n),
                             beta(cpu.beta(), cpu.beta() + n);
    std::vector<float> moving_mean(cpu.moving_mean(), cpu.moving_mean() + n),
        moving_variance(cpu.moving_variance(), cpu.moving_variance() + n);
    const std::vector<float> moving_mean_before = moving_mean;
    cpu.executor.forward();
    cpu.executor.backward();

    // The kernels' arithmetic: chunks of the shape's rows, each summing its live rows.
    const bm::chunking k = bm::chunking_of(rows);
    REQUIRE(k.chunks > 1);  // the replay must cross chunks
    const int live = bm::live_rows_of(valid_samples, 42, rows);
    CHECK(live == (valid_samples < 0 ? rows : valid_samples * 42));
    const double count = bm::divisor_of(live);
    auto chunked = [&](auto&& term) {  // the two-stage sum of term(r) over the live rows
      double total = 0;
      for (int c = 0; c < k.chunks; ++c) {
        double s = 0;
        for (int r = c * k.rows_per_chunk; r < bm::chunk_end(k, c, live); ++r) s += term(r);
        total += s;
      }
      return total;
    };
    const float update_weight = static_cast<float>(1.0 - 0.9);
    std::vector<float> mean(n), inverse_std(n), y(x.size()), dx(x.size()), d_gamma(n), d_beta(n);
    for (int j = 0; j < n; ++j) {
      const double mean_d = chunked([&](int r) { return double{x[r * n + j]}; }) / count;
      const double variance = chunked([&](int r) {
                                const double deviation = x[r * n + j] - mean_d;
                                return deviation * deviation;
                              }) / count;
      mean[j] = static_cast<float>(mean_d);
      inverse_std[j] = bm::inverse_std_of(variance, 1e-3f);
      if (live == 0) continue;
      moving_mean[j] = bm::moving_average_of(moving_mean[j], mean[j], 0.9f, update_weight);
      moving_variance[j] = bm::moving_average_of(moving_variance[j], static_cast<float>(variance), 0.9f, update_weight);
    }
    for (std::size_t e = 0; e < x.size(); ++e) {
      const int j = static_cast<int>(e % n);
      y[e] = bm::normalized_output(x[e], mean[j], inverse_std[j], gamma.data(), beta.data(), j);
    }
    for (int j = 0; j < n; ++j) {
      const double sum_dy = chunked([&](int r) { return double{dy[r * n + j]}; });
      const double sum_dyn = chunked(
          [&](int r) { return double{dy[r * n + j]} * bm::normalized_of(x[r * n + j], mean[j], inverse_std[j]); });
      d_gamma[j] = static_cast<float>(sum_dyn);
      d_beta[j] = static_cast<float>(sum_dy);
      const float factor = gamma[j] * inverse_std[j];
      for (int r = 0; r < rows; ++r)
        dx[r * n + j] = r < live ? bm::normalized_gradient(dy[r * n + j], x[r * n + j], mean[j], inverse_std[j], factor,
                                                           static_cast<float>(sum_dy / count),
                                                           static_cast<float>(sum_dyn / count))
                                 : 0.f;
    }
    const auto near = [](float a, float b) { return std::fabs(a - b) <= 2e-6f * (1.f + std::fabs(b)); };
    for (int j = 0; j < n; ++j) {
      CHECK(near(moving_mean[j], cpu.moving_mean()[j]));
      CHECK(near(moving_variance[j], cpu.moving_variance()[j]));
      CHECK(near(d_gamma[j], cpu.d_gamma()[j]));
      CHECK(near(d_beta[j], cpu.d_beta()[j]));
    }
    if (live == 0) CHECK(copy_of(std::span<const float>(cpu.moving_mean(), n)) == moving_mean_before);
    int off = 0;
    for (std::size_t e = 0; e < x.size(); ++e) off += !near(y[e], cpu.out[e]) + !near(dx[e], cpu.d_in()[e]);
    CHECK(off == 0);
    if (live < rows) CHECK(cpu.d_in()[static_cast<std::size_t>(live) * n] == 0.f);  // the padding's gradient
  }
}

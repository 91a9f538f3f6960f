// lora<Rank, Alpha> on dense and on attention's projections: the memory plan
// trains only the adapters (the kernels are frozen tensors), an adapted model
// starts as the pretrained one, finite differences agree with A's and B's
// gradients, training leaves the kernels bit for bit, merge_lora and
// save_weights({.merge_lora = true}) give a plain model the same outputs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <typeflow/typeflow.hpp>

#include "../support/gradient_check.hpp"
#include "../support/resume_fixture.hpp"
#include "../support/test_support.hpp"

namespace tf = typeflow;
namespace tf_testing = typeflow::testing;

namespace {

using plain_mlp = tf::sequential<tf::input<12>, tf::dense<32>, tf::relu, tf::dense<16>, tf::tanh, tf::dense<4>>;
using lora_mlp = tf::sequential<tf::input<12>, tf::dense<32, tf::lora<4, 8>>, tf::relu, tf::dense<16, tf::lora<2>>,
                                tf::tanh, tf::dense<4>>;

template <class Attention, class Up, class Down>
using gpt_block = tf::sequential<tf::residual<tf::layer_norm, Attention>, tf::residual<tf::layer_norm, Up, tf::gelu, Down>>;
using plain_block = gpt_block<tf::causal_self_attention<2>, tf::dense<64>, tf::dense<32>>;
using lora_block =
    gpt_block<tf::causal_self_attention<2, tf::lora<4, 8>>, tf::dense<64, tf::lora<4, 8>>, tf::dense<32, tf::lora<4, 8>>>;
using plain_gpt = tf::sequential<tf::typed_input<tf::int32, 16>, tf::embedding<20, 32>, tf::positional_embedding<16>,
                                 tf::repeat<2, plain_block>, tf::layer_norm, tf::dense<20>>;
using lora_gpt = tf::sequential<tf::typed_input<tf::int32, 16>, tf::embedding<20, 32>, tf::positional_embedding<16>,
                                tf::repeat<2, lora_block>, tf::layer_norm, tf::dense<20>>;

auto mlp_batch(int index) { return tf_testing::numbered_batch<32, 12, 4>(index); }

template <class Model>
void compile(Model& m, float rate = 0.01f) {
  m.compile(tf::optimizers::adam{.learning_rate = rate}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
}

template <class View>
std::vector<float> values(const View& v) {
  return std::vector<float>(v.begin(), v.end());
}

// Every parameter the plain model has, copied into the adapted one (the
// names agree: an adapter adds lora_kernel_a and lora_kernel_b beside its kernel).
template <class From, class To>
void copy_common(From& from, To& to) {
  for (const auto& spec : from.parameter_specs()) {
    const auto source = from.parameter(spec.name);
    auto target = to.parameter(spec.name);
    REQUIRE(source.size() == target.size());
    for (std::size_t i = 0; i < source.size(); ++i) target[i] = source[i];
  }
}

// Random values in the adapters' B (zeros at the start, which would make
// A's gradient zero and the adapter invisible).
template <class Model>
void randomize_b(Model& m) {
  std::uint32_t state = 12345;
  for (const auto& spec : m.parameter_specs())
    if (spec.name.find("lora_kernel_b") != std::string::npos) {
      auto b = m.parameter(spec.name);
      for (std::size_t i = 0; i < b.size(); ++i) {
        state = state * 1664525u + 1013904223u;
        b[i] = (static_cast<float>(state >> 8) / 16777216.f - 0.5f) * 0.4f;
      }
    }
}

// The batch as a dataset of one batch, for evaluate().
template <class Batch>
auto one_batch_dataset(const Batch& b) {
  return tf::data::from_tensor_slices<tf::shape<12>>(std::vector<float>(b.features.begin(), b.features.end()),
                                                     std::vector<std::int32_t>(b.labels.begin(), b.labels.end())) |
         tf::data::batch<32>;
}

std::vector<std::int32_t> token_ids(std::size_t n) {
  std::vector<std::int32_t> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<std::int32_t>((i * 7 + i / 3) % 20);
  return ids;
}

// The gradients of the tensors whose names hold `part`, by central differences.
template <class Model, class Dataset>
int check_adapter_gradients(Model& m, const Dataset& one_batch, const std::string& part) {
  return tf_testing::check_gradients_of(
      m, one_batch, [&](const std::string& name) { return name.find(part) != std::string::npos; }, 3e-4);
}

}  // namespace

TEST_CASE("lora: the plan trains the adapters only, the kernels have no gradient and no optimizer slot") {
  // dense<32, lora<4, 8>> on 12 features: kernel (12, 32) frozen; A (12, 4), B (4, 32) trained.
  using params = lora_mlp::layer<1>::params;
  static_assert(params::is_frozen<0> && !params::is_frozen<1> && !params::is_frozen<2> && !params::is_frozen<3>);
  constexpr std::size_t kernel_1 = tf::aligned_floats(12 * tf::padded_row_length(32));
  constexpr std::size_t kernel_3 = tf::aligned_floats(32 * tf::padded_row_length(16));
  constexpr std::size_t adapters = tf::aligned_floats(12 * tf::padded_row_length(4)) +
                                   tf::aligned_floats(4 * tf::padded_row_length(32)) +
                                   tf::aligned_floats(32 * tf::padded_row_length(2)) +
                                   tf::aligned_floats(2 * tf::padded_row_length(16));
  static_assert(lora_mlp::trainable_floats == plain_mlp::trainable_floats - kernel_1 - kernel_3 + adapters);
  static_assert(lora_mlp::parameter_floats == plain_mlp::parameter_floats + adapters);
  // Adam: gradient, m and v exist for the trained floats only.
  using with = tf::memory_plan<lora_mlp, 32, 2>;
  using without = tf::memory_plan<plain_mlp, 32, 2>;
  CHECK(with::activations_offset == without::activations_offset + adapters * sizeof(float) -
                                        3 * (kernel_1 + kernel_3) * sizeof(float) + 3 * adapters * sizeof(float));
  // The frozen kernels lie after every trained tensor.
  CHECK(with::layer_frozen_offset[1] >= with::trainable_bytes);
  // The GPT: attention's two kernels and the MLP's two per block are frozen,
  // (32, 96), (32, 32), (32, 64) and (64, 32) with padded rows, in both blocks.
  constexpr std::size_t gpt_kernels = 2 * (tf::aligned_floats(32 * tf::padded_row_length(96)) +
                                           tf::aligned_floats(32 * tf::padded_row_length(32)) +
                                           tf::aligned_floats(32 * tf::padded_row_length(64)) +
                                           tf::aligned_floats(64 * tf::padded_row_length(32)));
  CHECK(lora_gpt::trainable_floats == plain_gpt::trainable_floats - gpt_kernels +
                                          (lora_gpt::parameter_floats - plain_gpt::parameter_floats));
  tf::model<lora_gpt> m;
  const auto names = m.parameter_specs();
  bool has_qkv_a = false;
  for (const auto& s : names) has_qkv_a = has_qkv_a || s.name == "blocks.0.attn.qkv.lora_kernel_a";
  CHECK(has_qkv_a);
  CHECK_THROWS_WITH_AS(m.gradient("blocks.1.attn.proj.kernel"), doctest::Contains("is frozen"), std::invalid_argument);
}

TEST_CASE("lora: an adapted MLP starts as the pretrained one, trains its adapters and leaves the kernels") {
  tf::model<plain_mlp> pretrained{3};
  compile(pretrained);
  for (int i = 0; i < 5; ++i) pretrained.train_on_batch(mlp_batch(i));
  tf::model<lora_mlp> adapted{4};
  copy_common(pretrained, adapted);
  compile(adapted);
  auto one = one_batch_dataset(mlp_batch(9));
  // B starts at zero: the same outputs as the pretrained model.
  CHECK(adapted.evaluate(one).at("loss") == doctest::Approx(pretrained.evaluate(one).at("loss")).epsilon(1e-6));
  const auto kernel = values(adapted.parameter("layers.1.kernel"));
  const auto a_before = values(adapted.parameter("layers.1.lora_kernel_a"));
  const auto h = adapted.fit(tf_testing::classifier_data(), {.epochs = 6, .verbose = 0});
  CHECK(h["loss"].back() < 0.8 * h["loss"].front());
  CHECK(values(adapted.parameter("layers.1.kernel")) == kernel);
  CHECK(values(adapted.parameter("layers.1.lora_kernel_a")) != a_before);
}

TEST_CASE("lora: the adapters' gradients are the merged kernel's, through A and B") {
  // y = x (W + s A B): with G the gradient of the merged kernel, dA = s G B^T
  // and dB = s A^T G; the biases' gradients and the loss are the merged model's.
  tf::model<lora_mlp> adapted{12};
  compile(adapted, 0.f);
  randomize_b(adapted);
  tf::model<plain_mlp> merged{13};
  compile(merged, 0.f);
  tf::merge_lora(adapted, merged);
  const auto batch = mlp_batch(4);
  CHECK(adapted.train_on_batch(batch) == doctest::Approx(merged.train_on_batch(batch)).epsilon(1e-5));
  for (const std::string layer : {"layers.1.", "layers.3."}) {
    const int in = layer == "layers.1." ? 12 : 32, out = layer == "layers.1." ? 32 : 16, rank = layer == "layers.1." ? 4 : 2;
    const double s = layer == "layers.1." ? 2.0 : 1.0;
    const auto g = values(merged.gradient(layer + "kernel"));
    const auto a = values(adapted.parameter(layer + "lora_kernel_a"));
    const auto b = values(adapted.parameter(layer + "lora_kernel_b"));
    const auto da = values(adapted.gradient(layer + "lora_kernel_a"));
    const auto db = values(adapted.gradient(layer + "lora_kernel_b"));
    double largest = 0;
    for (float v : g) largest = std::max(largest, double{std::fabs(v)});
    REQUIRE(largest > 1e-3);
    for (int i = 0; i < in; ++i)
      for (int k = 0; k < rank; ++k) {
        double expected = 0;
        for (int j = 0; j < out; ++j) expected += s * g[i * out + j] * b[k * out + j];
        INFO(layer << "lora_kernel_a[" << i << ", " << k << "]");
        CHECK(da[i * rank + k] == doctest::Approx(expected).epsilon(1e-4).scale(largest));
      }
    for (int k = 0; k < rank; ++k)
      for (int j = 0; j < out; ++j) {
        double expected = 0;
        for (int i = 0; i < in; ++i) expected += s * a[i * rank + k] * g[i * out + j];
        INFO(layer << "lora_kernel_b[" << k << ", " << j << "]");
        CHECK(db[k * out + j] == doctest::Approx(expected).epsilon(1e-4).scale(largest));
      }
    const auto bias_a = values(adapted.gradient(layer + "bias")), bias_m = values(merged.gradient(layer + "bias"));
    for (std::size_t j = 0; j < bias_a.size(); ++j) CHECK(bias_a[j] == doctest::Approx(bias_m[j]).epsilon(1e-4).scale(largest));
  }
}

TEST_CASE("lora: finite differences agree with the adapters' gradients, on dense and on attention") {
  SUBCASE("an MLP") {
    // Smooth activations: a relu's kink inside the difference step would blur it.
    using net = tf::sequential<tf::input<12>, tf::dense<32, tf::lora<4, 8>>, tf::tanh, tf::dense<16, tf::lora<2>>,
                               tf::gelu, tf::dense<4>>;
    tf::model<net> m{5};
    compile(m, 0.f);
    randomize_b(m);
    const auto batch = mlp_batch(2);
    m.train_on_batch(batch);
    auto one = one_batch_dataset(batch);
    CHECK(check_adapter_gradients(m, one, "lora_kernel") > 40);
    CHECK(check_adapter_gradients(m, one, "bias") > 10);  // the biases stay trained
  }
  SUBCASE("a GPT with adapters on qkv, proj and the MLP") {
    tf::model<lora_gpt> m{6};
    compile(m, 0.f);
    randomize_b(m);
    auto data = tf::data::lm_windows<16>(token_ids(16 * 8), 16) | tf::data::batch<4>;
    typename decltype(data)::element_type batch;
    auto cursor = data.open();
    REQUIRE(cursor.next(batch));
    m.train_on_batch(batch);
    auto one = tf::data::lm_windows<16>(token_ids(16 * 8), 16) | tf::data::take(4) | tf::data::batch<4>;
    CHECK(check_adapter_gradients(m, one, "attn.qkv.lora") > 20);
    CHECK(check_adapter_gradients(m, one, "attn.proj.lora") > 20);
    CHECK(check_adapter_gradients(m, one, "blocks.1.dense_1.lora") > 20);
  }
}

TEST_CASE("lora: merge_lora and save_weights with merge_lora give the plain model the adapted outputs") {
  tf::model<lora_gpt> adapted{7};
  compile(adapted);
  randomize_b(adapted);
  auto data = tf::data::lm_windows<16>(token_ids(16 * 40), 1) | tf::data::batch<8>;
  adapted.fit(data, {.epochs = 1, .verbose = 0});
  auto check = tf::data::lm_windows<16>(token_ids(16 * 8), 16) | tf::data::batch<4>;
  const double adapted_loss = adapted.evaluate(check).at("loss");

  tf::model<plain_gpt> merged{8};
  compile(merged);
  tf::merge_lora(adapted, merged);
  CHECK(merged.evaluate(check).at("loss") == doctest::Approx(adapted_loss).epsilon(1e-5));
  // The fold really changed the kernel: W + s A B differs from W.
  CHECK(values(merged.parameter("blocks.0.attn.qkv.kernel")) != values(adapted.parameter("blocks.0.attn.qkv.kernel")));

  tf_testing::temp_dir dir("typeflow_lora_test");
  adapted.save_weights(dir.path / "merged.safetensors", {.merge_lora = true});
  tf::model<plain_gpt> loaded{9};
  compile(loaded);
  loaded.load_weights(dir.path / "merged.safetensors");  // exactly the plain model's names and shapes
  CHECK(loaded.evaluate(check).at("loss") == doctest::Approx(adapted_loss).epsilon(1e-5));
  // Generation runs the adapters in the decoder too: the same tokens as the merged model's.
  const std::vector<std::int32_t> prompt{1, 2, 3};
  CHECK(adapted.generate(prompt, 6, {.temperature = 0.f}) == merged.generate(prompt, 6, {.temperature = 0.f}));

  // An adapted model's own file keeps the adapters and reads back whole.
  adapted.save_weights(dir.path / "adapted.safetensors");
  tf::model<lora_gpt> again{10};
  again.load_weights(dir.path / "adapted.safetensors");
  CHECK(values(again.parameter("blocks.1.dense.lora_kernel_b")) == values(adapted.parameter("blocks.1.dense.lora_kernel_b")));
  tf::model<lora_mlp> wrong;
  tf::model<plain_gpt> target;
  CHECK_THROWS_WITH_AS(tf::merge_lora(wrong, target), doctest::Contains("has no parameter"), std::invalid_argument);
}

TEST_CASE("lora: under mixed_bfloat16 the adapters train and the kernels stay") {
  using net = tf::sequential<tf::input<12>, tf::dense<32, tf::lora<4, 8>>, tf::relu, tf::dense<16, tf::lora<2>>,
                             tf::tanh, tf::dense<4, tf::float32>>;
  tf::model<net, tf::mixed_bfloat16> m{11};
  compile(m);
  const auto kernel = values(m.parameter("layers.3.kernel"));
  double first = 0, last = 0;
  for (int i = 0; i < 30; ++i) {
    const double loss = m.train_on_batch(mlp_batch(i % 6));
    if (i == 0) first = loss;
    last = loss;
  }
  CHECK(last < first);
  CHECK(values(m.parameter("layers.3.kernel")) == kernel);
}

// frozen<Layers...>: the memory plan holds no gradient and no optimizer slot
// for frozen parameters, training leaves them bit for bit, the trainable
// part's gradients are the unfrozen model's, backward stops above a frozen
// bottom, batch_norm inside runs in inference mode, and checkpoints and
// mirrored<N> work with the smaller regions.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <typeflow/typeflow.hpp>

#include "../support/resume_fixture.hpp"
#include "../support/test_support.hpp"

namespace tf = typeflow;
namespace tf_testing = typeflow::testing;

namespace {

using plain = tf::sequential<tf::input<12>, tf::dense<32>, tf::relu, tf::dense<16>, tf::tanh, tf::dense<4>>;
using frozen_bottom =
    tf::sequential<tf::input<12>, tf::frozen<tf::dense<32>, tf::relu>, tf::dense<16>, tf::tanh, tf::dense<4>>;
using frozen_middle =
    tf::sequential<tf::input<12>, tf::dense<32>, tf::relu, tf::frozen<tf::dense<16>, tf::tanh>, tf::dense<4>>;

// A small GPT with its embeddings and first block frozen.
using block = tf::sequential<tf::residual<tf::layer_norm, tf::causal_self_attention<2>>,
                             tf::residual<tf::layer_norm, tf::dense<64>, tf::gelu, tf::dense<32>>>;
using gpt = tf::sequential<tf::typed_input<tf::int32, 16>, tf::embedding<20, 32>, tf::positional_embedding<16>,
                           tf::repeat<2, block>, tf::layer_norm, tf::dense<20>>;
using gpt_lower_half_frozen =
    tf::sequential<tf::typed_input<tf::int32, 16>, tf::frozen<tf::embedding<20, 32>, tf::positional_embedding<16>, block>,
                   block, tf::layer_norm, tf::dense<20>>;

auto batch_number(int index) { return tf_testing::numbered_batch<32, 12, 4>(index); }

template <class Model>
void compile(Model& m) {
  m.compile(tf::optimizers::adam{.learning_rate = 0.01}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
}

template <class View>
std::vector<float> values(const View& v) {
  return std::vector<float>(v.begin(), v.end());
}

// Copies every parameter of `from` into `to`, by a table of names.
template <class From, class To>
void copy_weights(From& from, To& to, const std::vector<std::pair<std::string, std::string>>& names) {
  for (const auto& [a, b] : names) {
    const auto source = from.parameter(a);
    auto target = to.parameter(b);
    REQUIRE(source.size() == target.size());
    for (std::size_t i = 0; i < source.size(); ++i) target[i] = source[i];
  }
}

}  // namespace

TEST_CASE("frozen: the memory plan has no gradient and no optimizer slot for frozen parameters") {
  constexpr std::size_t frozen_floats = plain::parameter_floats - frozen_bottom::trainable_floats;
  static_assert(frozen_bottom::parameter_floats == plain::parameter_floats);
  static_assert(frozen_floats == tf::memory_plan<plain, 0, 0>::layer_parameter_offset[2] / sizeof(float));
  // Adam's two slots: the plan is smaller by the frozen floats three times (gradient, m, v).
  constexpr std::size_t saved = tf::memory_plan<plain, 32, 2>::activations_offset -
                                tf::memory_plan<frozen_bottom, 32, 2>::activations_offset;
  CHECK(saved == 3 * frozen_floats * sizeof(float));
  // The GPT: the embeddings and one of two blocks.
  using full = tf::memory_plan<gpt, 8, 2>;
  using half = tf::memory_plan<gpt_lower_half_frozen, 8, 2>;
  constexpr std::size_t gpt_frozen = gpt_lower_half_frozen::parameter_floats - gpt_lower_half_frozen::trainable_floats;



  CHECK(full::activations_offset - half::activations_offset == 3 * gpt_frozen * sizeof(float));
  CHECK(gpt_frozen > gpt_lower_half_frozen::parameter_floats / 3);
  // Backward stops above a frozen bottom: nothing below layer 2 is trained.
  static_assert(!frozen_bottom::needs_input_gradient[1] && !frozen_bottom::needs_input_gradient[2]);
  static_assert(frozen_middle::needs_input_gradient[3]);
  static_assert(!gpt_lower_half_frozen::needs_input_gradient[2]);
}

TEST_CASE("frozen at the bottom: frozen weights stay bit for bit, the rest trains as the unfrozen model's") {
  tf::model<frozen_bottom> frozen{3};
  tf::model<plain> unfrozen{3};
  copy_weights(frozen, unfrozen,
               {{"layers.1.dense.kernel", "layers.1.kernel"}, {"layers.1.dense.bias", "layers.1.bias"},
                {"layers.2.kernel", "layers.3.kernel"}, {"layers.2.bias", "layers.3.bias"},
                {"layers.4.kernel", "layers.5.kernel"}, {"layers.4.bias", "layers.5.bias"}});
  compile(frozen);
  compile(unfrozen);
  const auto kernel_before = values(frozen.parameter("layers.1.dense.kernel"));
  frozen.train_on_batch(batch_number(0));
  unfrozen.train_on_batch(batch_number(0));
  // The same loss gradient for the layers above: bit for bit.
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{
           {"layers.2.kernel", "layers.3.kernel"}, {"layers.4.kernel", "layers.5.kernel"}, {"layers.4.bias", "layers.5.bias"}})
    CHECK(values(frozen.gradient(a)) == values(unfrozen.gradient(b)));
  CHECK_THROWS_WITH_AS(frozen.gradient("layers.1.dense.kernel"), doctest::Contains("is frozen"), std::invalid_argument);
  for (int i = 1; i < 6; ++i) frozen.train_on_batch(batch_number(i));
  CHECK(values(frozen.parameter("layers.1.dense.kernel")) == kernel_before);
  CHECK(values(frozen.parameter("layers.2.kernel")) != values(unfrozen.parameter("layers.3.kernel")));  // it trained
}

TEST_CASE("frozen in the middle: the gradient passes through it to the trainable layers below") {
  tf::model<frozen_middle> frozen{4};
  tf::model<plain> unfrozen{4};
  copy_weights(frozen, unfrozen,
               {{"layers.1.kernel", "layers.1.kernel"}, {"layers.1.bias", "layers.1.bias"},
                {"layers.3.dense.kernel", "layers.3.kernel"}, {"layers.3.dense.bias", "layers.3.bias"},
                {"layers.4.kernel", "layers.5.kernel"}, {"layers.4.bias", "layers.5.bias"}});
  compile(frozen);
  compile(unfrozen);
  const double a = frozen.train_on_batch(batch_number(7));
  const double b = unfrozen.train_on_batch(batch_number(7));
  CHECK(a == b);
  CHECK(values(frozen.gradient("layers.1.kernel")) == values(unfrozen.gradient("layers.1.kernel")));
  CHECK(values(frozen.gradient("layers.4.kernel")) == values(unfrozen.gradient("layers.5.kernel")));
  const auto middle = values(frozen.parameter("layers.3.dense.kernel"));
  frozen.train_on_batch(batch_number(8));
  CHECK(values(frozen.parameter("layers.3.dense.kernel")) == middle);
}

TEST_CASE("frozen: a GPT's embeddings and first block stay put while the rest learns") {
  tf::model<gpt_lower_half_frozen> m{5};
  compile(m);
  std::vector<std::int32_t> ids(16 * 40);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7 + i / 3) % 20);
  auto data = tf::data::lm_windows<16>(ids, 1) | tf::data::batch<8>;
  std::vector<std::vector<float>> frozen_before;
  std::vector<std::string> frozen_names;
  for (const auto& spec : m.parameter_specs())
    if (spec.name.rfind("layers.1.", 0) == 0) {
      frozen_names.push_back(spec.name);
      frozen_before.push_back(values(m.parameter(spec.name)));
    }
  REQUIRE(frozen_names.size() > 4);
  const auto h = m.fit(data, {.epochs = 3, .verbose = 0});
  CHECK(h["loss"].back() < h["loss"].front());
  for (std::size_t k = 0; k < frozen_names.size(); ++k) CHECK(values(m.parameter(frozen_names[k])) == frozen_before[k]);
  // The decoder (key/value caches) runs through the frozen block too.
  const std::vector<std::int32_t> prompt{1, 2, 3};
  const auto next = m.generate(prompt, 5, {.temperature = 0.f});
  CHECK(next.size() == 5);
}

TEST_CASE("frozen: batch_norm inside runs in inference mode and keeps its statistics") {
  using net = tf::sequential<tf::input<12>, tf::frozen<tf::dense<16>, tf::batch_normalization<>, tf::relu>, tf::dense<4>>;
  tf::model<net> m{6};
  compile(m);
  const auto mean = values(m.parameter("layers.1.batch_norm.moving_mean"));
  const auto variance = values(m.parameter("layers.1.batch_norm.moving_variance"));
  for (int i = 0; i < 4; ++i) m.train_on_batch(batch_number(i));
  CHECK(values(m.parameter("layers.1.batch_norm.moving_mean")) == mean);
  CHECK(values(m.parameter("layers.1.batch_norm.moving_variance")) == variance);
  // Training-mode and inference-mode outputs of the frozen part agree: the
  // prediction of a batch equals what training's forward saw (its loss).
  const auto b = batch_number(9);
  auto one = tf::data::from_tensor_slices<tf::shape<12>>(std::vector<float>(b.features.begin(), b.features.end()),
                                                        std::vector<std::int32_t>(b.labels.begin(), b.labels.end())) |
             tf::data::batch<32>;
  const double evaluated = m.evaluate(one).at("loss");
  tf::model<net> twin{6};
  compile(twin);
  for (int i = 0; i < 4; ++i) twin.train_on_batch(batch_number(i));
  CHECK(twin.train_on_batch(b) == doctest::Approx(evaluated).epsilon(1e-6));
}

TEST_CASE("frozen: checkpoints hold the smaller slots and resume bit for bit, mirrored<2> keeps replicas equal") {
  tf_testing::temp_dir dir("typeflow_frozen_test_checkpoint");
  tf::model<frozen_middle> whole{8}, first{8}, resumed{9};
  compile(whole);
  compile(first);
  compile(resumed);
  for (int i = 0; i < 6; ++i) whole.train_on_batch(batch_number(i));
  for (int i = 0; i < 3; ++i) first.train_on_batch(batch_number(i));
  first.save_checkpoint(dir.path);
  const auto read = tf::io::read_checkpoint(dir.path);
  CHECK(read.tensors.find("optimizer.slot.0")->shape ==
        std::vector<std::int64_t>{static_cast<std::int64_t>(frozen_middle::trainable_floats)});
  resumed.load_checkpoint(dir.path);
  for (int i = 3; i < 6; ++i) resumed.train_on_batch(batch_number(i));
  const auto x = resumed.parameter_region(), y = whole.parameter_region();
  CHECK(std::memcmp(x.data(), y.data(), x.size_bytes()) == 0);

  tf::model<frozen_middle, tf::float32, tf::mirrored<2>> replicated{8};
  compile(replicated);
  for (int i = 0; i < 3; ++i) replicated.train_on_batch(batch_number(i));
  const auto r0 = replicated.replica_parameter_region(0), r1 = replicated.replica_parameter_region(1);
  CHECK(std::memcmp(r0.data(), r1.data(), r0.size_bytes()) == 0);
}

TEST_CASE("frozen: summary counts a frozen layer's parameters as non-trainable, per layer and in total") {
  char buffer[4096] = {};
  std::FILE* out = fmemopen(buffer, sizeof buffer - 1, "w");
  REQUIRE(out != nullptr);
  tf::model<frozen_bottom> model;
  model.summary(out);
  std::fclose(out);
  const std::string text = buffer;
  const auto line = [&](const std::string& start) {
    const auto at = text.find(start);
    REQUIRE(at != std::string::npos);
    return text.substr(at, text.find('\n', at) - at);
  };
  // layers.1 holds 12 * 32 + 32 = 416 parameters, none trained; layers.2 16 * 32 + 16 = 528, all.
  CHECK(line("layers.1 (frozen<dense<32>, relu>)").find("416          0 ") != std::string::npos);
  CHECK(line("layers.2 (dense<16>)").find("528          528 ") != std::string::npos);
  CHECK(text.find("Trainable params: 596") != std::string::npos);
  CHECK(text.find("Non-trainable params: 416") != std::string::npos);
}

TEST_CASE("frozen inside repeat: each block's attention half frozen, its MLP half trained as the unfrozen model's") {
  using half_frozen_block = tf::sequential<tf::frozen<tf::residual<tf::layer_norm, tf::causal_self_attention<2>>>,
                                           tf::residual<tf::layer_norm, tf::dense<64>, tf::gelu, tf::dense<32>>>;
  using nested = tf::sequential<tf::typed_input<tf::int32, 16>, tf::embedding<20, 32>, tf::positional_embedding<16>,
                                tf::repeat<2, half_frozen_block>, tf::layer_norm, tf::dense<20>>;
  // The plan: the two attention halves (layer_norm and both projections) have no gradient and no slot.
  constexpr std::size_t attention_floats =
      2 * (2 * tf::aligned_floats(32) + tf::aligned_floats(32 * tf::padded_row_length(96)) + tf::aligned_floats(96) +
           tf::aligned_floats(32 * tf::padded_row_length(32)) + tf::aligned_floats(32));
  static_assert(nested::trainable_floats == gpt::trainable_floats - attention_floats);
  static_assert(nested::parameter_floats == gpt::parameter_floats);

  tf::model<nested> frozen{11};
  tf::model<gpt> unfrozen{11};
  // The same names: frozen<> inside a block names its tensors as the block would.
  for (const auto& spec : frozen.parameter_specs()) {
    const auto source = frozen.parameter(spec.name);
    auto target = unfrozen.parameter(spec.name);
    REQUIRE(source.size() == target.size());
    for (std::size_t i = 0; i < source.size(); ++i) target[i] = source[i];
  }
  compile(frozen);
  compile(unfrozen);
  std::vector<std::int32_t> ids(16 * 40);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7 + i / 3) % 20);
  auto data = tf::data::lm_windows<16>(ids, 16) | tf::data::batch<8>;
  typename decltype(data)::element_type batch;
  auto cursor = data.open();
  REQUIRE(cursor.next(batch));
  CHECK(frozen.train_on_batch(batch) == unfrozen.train_on_batch(batch));
  for (const std::string name : {"blocks.0.dense.kernel", "blocks.1.dense_1.bias", "layers.1.embeddings", "layers.5.kernel"})
    CHECK(values(frozen.gradient(name)) == values(unfrozen.gradient(name)));
  CHECK_THROWS_WITH_AS(frozen.gradient("blocks.1.attn.qkv.kernel"), doctest::Contains("is frozen"), std::invalid_argument);
  const auto attention = values(frozen.parameter("blocks.0.attn.proj.kernel"));
  const auto gamma = values(frozen.parameter("blocks.1.layer_norm.gamma"));
  const auto mlp = values(frozen.parameter("blocks.0.dense.kernel"));
  const auto h = frozen.fit(tf::data::lm_windows<16>(ids, 1) | tf::data::batch<8>, {.epochs = 2, .verbose = 0});
  CHECK(h["loss"].back() < h["loss"].front());
  CHECK(values(frozen.parameter("blocks.0.attn.proj.kernel")) == attention);
  CHECK(values(frozen.parameter("blocks.1.layer_norm.gamma")) == gamma);
  CHECK(values(frozen.parameter("blocks.0.dense.kernel")) != mlp);
}

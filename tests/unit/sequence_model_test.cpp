// Sequence models: embeddings, residual/repeat/recompute blocks, tied
// logits, and generation. (Attention itself: attention_test.cpp; a whole GPT
// against PyTorch: gpt_reference_test.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <typeflow/typeflow.hpp>

#include "../support/bound_layer.hpp"
#include "../support/gradient_check.hpp"
#include "../support/test_support.hpp"

namespace tf = typeflow;
using tf::testing::check_gradients;
using tf::testing::contains;
using tf::testing::message_of;

namespace {

constexpr int T = 6, D = 8, V = 11;

// A transformer block without attention: the combinators are what is tested here.
using mlp_block = tf::sequential<tf::residual<tf::layer_norm, tf::dense<D>>,
                                 tf::residual<tf::layer_norm, tf::dense<4 * D>, tf::gelu, tf::dense<D>>>;
// Embeddings of unit scale: finite differences of step 1e-2 stay in the
// linear range of the layer_norm that follows them.
using unit = tf::embeddings_initializer<tf::initializers::random_normal<1.f>>;
template <class Blocks, class Head = tf::tied_logits>
using lm = tf::sequential<tf::typed_input<tf::int32, T>, tf::embedding<V, D, unit>, tf::positional_embedding<T, unit>,
                          Blocks, tf::layer_norm, Head>;
using kept_net = lm<tf::repeat<3, mlp_block>>;
using recomputed_net = lm<tf::repeat<3, tf::recompute<mlp_block>>>;

constexpr int batch = 4;
using ids = tf::data::tensor_value<std::int32_t, tf::shape<T>>;
using batch_type = tf::data::batch_of<batch, ids, ids>;

batch_type token_batch(std::uint64_t salt = 0) {
  batch_type b;
  for (std::size_t i = 0; i < b.features.size(); ++i)
    b.features[i] = static_cast<std::int32_t>(tf::random_stream{77 + salt, 0}.uniform(i) * V);
  for (std::size_t i = 0; i < b.labels.size(); ++i)
    b.labels[i] = static_cast<std::int32_t>(tf::random_stream{91 + salt, 0}.uniform(i) * V);
  b.valid = batch;
  return b;
}

const tf::losses::sparse_categorical_crossentropy logits_loss{.from_logits = true};

}  // namespace

TEST_CASE("a language model's shapes and parameter count are known at compile time") {
  static_assert(kept_net::output_shape == tf::shape<T, V>{});
  constexpr std::size_t layer_norm_params = 2 * D;
  constexpr std::size_t block_params = 2 * layer_norm_params + (D * D + D) + (D * 4 * D + 4 * D) + (4 * D * D + D);
  static_assert(kept_net::parameter_count == V * D + T * D + 3 * block_params + layer_norm_params);
  static_assert(recomputed_net::parameter_count == kept_net::parameter_count);
  // Untied, the head has its own kernel and bias.
  static_assert(lm<mlp_block, tf::dense<V>>::parameter_count ==
                V * D + T * D + block_params + layer_norm_params + D * V + V);
}

TEST_CASE("parameters inside repeated blocks are named per copy, Keras-style within a block") {
  tf::model<kept_net> model{1};
  std::vector<std::string> names;
  for (const auto& spec : model.parameter_specs()) names.push_back(spec.name);
  const std::vector<std::string> expected_start{
      "layers.1.embeddings",       "layers.2.embeddings",        "blocks.0.layer_norm.gamma",
      "blocks.0.layer_norm.beta",  "blocks.0.dense.kernel",      "blocks.0.dense.bias",
      "blocks.0.layer_norm_1.gamma", "blocks.0.layer_norm_1.beta", "blocks.0.dense_1.kernel",
      "blocks.0.dense_1.bias",     "blocks.0.dense_2.kernel",    "blocks.0.dense_2.bias",
      "blocks.1.layer_norm.gamma"};
  REQUIRE(names.size() == 2 + 3 * 10 + 2);
  for (std::size_t i = 0; i < expected_start.size(); ++i) CHECK(names[i] == expected_start[i]);
  CHECK(names[2 + 2 * 10 + 8] == "blocks.2.dense_2.kernel");
  CHECK(names.back() == "layers.4.beta");
  // A residual at the top level is named under its position.
  tf::model<lm<mlp_block>> single{1};
  CHECK(single.parameter_specs()[2].name == "layers.3.layer_norm.gamma");
  CHECK(single.parameter_specs()[6].name == "layers.3.layer_norm_1.gamma");
}

TEST_CASE("recompute moves each block's inner activations out of the kept memory, by the expected amount") {
  using kept = tf::memory_plan<kept_net, batch, 0>;
  using recomputed = tf::memory_plan<recomputed_net, batch, 0>;
  // Per block and sample, kept without recompute: the first residual's
  // layer_norm output and output (T x D each), the second's layer_norm
  // output (T x D), dense output and gelu output (T x 4D each): 11 T·D
  // floats, plus two layer_norm workspaces (mean and 1/std per row).
  constexpr std::size_t inner = 11 * T * D * sizeof(float) + 2 * 2 * T * sizeof(float);
  constexpr std::size_t expected = 3 * batch * inner;
  const std::size_t cut = kept::kept_activation_bytes - recomputed::kept_activation_bytes;
  INFO("kept " << kept::kept_activation_bytes << " B, recomputed " << recomputed::kept_activation_bytes
               << " B, cut " << cut << " B, expected " << expected << " B plus alignment");
  CHECK(cut >= expected);
  CHECK(cut <= expected + 3 * 24 * tf::arena_alignment);  // each region rounds up to 64 bytes
  // The recomputed activations need room only once, in the shared scratch region.
  CHECK(recomputed::scratch_bytes >= batch * inner);
  CHECK(recomputed::scratch_bytes < kept::scratch_bytes + 2 * batch * inner);
}

TEST_CASE("recompute gives the same gradients as keeping the activations, bit for bit") {
  tf::model<kept_net> kept{3};
  tf::model<recomputed_net> recomputed{3};
  kept.compile(tf::optimizers::adam{.learning_rate = 1e-2}, logits_loss);
  recomputed.compile(tf::optimizers::adam{.learning_rate = 1e-2}, logits_loss);
  REQUIRE(kept.parameter_specs().size() == recomputed.parameter_specs().size());
  for (int step = 0; step < 3; ++step) {
    const auto b = token_batch(static_cast<std::uint64_t>(step));
    CHECK(kept.train_on_batch(b) == recomputed.train_on_batch(b));
    for (const auto& spec : kept.parameter_specs()) {
      const auto a = kept.gradient(spec.name);
      const auto r = recomputed.gradient(spec.name);
      bool same = true;
      for (std::size_t i = 0; i < a.size(); ++i) same = same && a[i] == r[i];
      INFO(spec.name << " at step " << step);
      CHECK(same);
    }
  }
}

TEST_CASE("embedding, positional embedding, residual blocks and tied logits match finite differences") {
  check_gradients<lm<mlp_block>>(logits_loss, token_batch());
  check_gradients<lm<tf::repeat<2, tf::recompute<mlp_block>>, tf::dense<V>>>(logits_loss, token_batch(1));
}

TEST_CASE("tied logits reuse the embedding matrix, whose gradient gets both contributions") {
  tf::model<lm<mlp_block>> tied{5};
  tf::model<lm<mlp_block, tf::dense<V>>> untied{5};
  CHECK(tied.parameter_count + D * V + V == untied.parameter_count);
  // Changing the embedding changes the logits even for a fixed hidden state:
  // the gradient of the table is nonzero for rows no input token uses.
  tied.compile(tf::optimizers::sgd{.learning_rate = 0.f}, logits_loss);
  auto b = token_batch();
  for (auto& id : b.features) id = id % 3;  // only ids 0..2 are looked up
  tied.train_on_batch(b);
  const auto grad = tied.gradient("layers.1.embeddings");
  double unused_rows = 0;
  for (std::size_t i = 3 * D; i < grad.size(); ++i) unused_rows += std::fabs(grad[i]);
  CHECK(unused_rows > 0);
}

TEST_CASE("an id outside the vocabulary stops the step with its place") {
  tf::model<lm<mlp_block>> model{1};
  model.compile(tf::optimizers::sgd{}, logits_loss);
  auto b = token_batch();
  b.features[2 * T + 4] = V + 3;
  const auto message = message_of<std::out_of_range>([&] { model.train_on_batch(b); });
  CHECK(contains(message, "token id 14 at sample 2, position 4"));
  CHECK(contains(message, "[0, 11)"));
}

TEST_CASE("generate refuses bad prompts and options with messages") {
  tf::model<lm<mlp_block>> model{1};
  const std::vector<std::int32_t> good{1, 2, 3};
  CHECK(contains(message_of<std::invalid_argument>([&] { model.generate({}, 3); }), "at least one token"));
  const std::vector<std::int32_t> outside{1, 11, 2};
  CHECK(contains(message_of<std::invalid_argument>([&] { model.generate(outside, 3); }),
                 "prompt token 11 at position 1 is outside the vocabulary [0, 11)"));
  CHECK(contains(message_of<std::invalid_argument>([&] { model.generate(good, 3, {.temperature = -1.f}); }),
                 "temperature"));
  CHECK(contains(message_of<std::invalid_argument>([&] { model.generate(good, 3, {.top_k = 12}); }), "top_k"));
  CHECK(model.generate(good, 0).empty());
}

// With attention and recompute: the decoder keeps the key/value caches even
// where training recomputes the block.
using attention_block = tf::sequential<tf::residual<tf::layer_norm, tf::causal_self_attention<2>>,
                                       tf::residual<tf::layer_norm, tf::dense<4 * D>, tf::gelu, tf::dense<D>>>;
using attention_lm = lm<tf::repeat<2, tf::recompute<attention_block>>>;

TEST_CASE("generate: greedy decoding follows the full forward pass, and sampling is reproducible") {
  tf::model<attention_lm> model{2};
  // The decoder's logits at position p equal the full network's at p: feed a
  // whole window through predict and compare with greedy generation from
  // its first token, one position at a time.
  const std::vector<std::int32_t> prompt{4};
  const auto greedy = model.generate(prompt, T - 1, {.temperature = 0.f});
  REQUIRE(greedy.size() == T - 1);
  std::vector<std::int32_t> window{prompt[0]};
  window.insert(window.end(), greedy.begin(), greedy.end());
  auto full = tf::data::from_tensor_slices<tf::shape<T>, tf::shape<T>>(window, window) | tf::data::batch<1>;
  const auto logits = model.predict(full);
  REQUIRE(logits.size() == T * V);
  for (int p = 0; p + 1 < T; ++p) {
    const float* row = logits.data() + p * V;
    CHECK(std::max_element(row, row + V) - row == window[p + 1]);
  }
  // Longer than the block size: the context slides, nothing breaks.
  const auto long_run = model.generate(prompt, 4 * T, {.temperature = 0.8f, .top_k = 5, .seed = 9});
  CHECK(long_run.size() == 4 * T);
  CHECK(long_run == model.generate(prompt, 4 * T, {.temperature = 0.8f, .top_k = 5, .seed = 9}));
  CHECK(long_run != model.generate(prompt, 4 * T, {.temperature = 0.8f, .top_k = 5, .seed = 10}));
  for (auto id : long_run) CHECK((id >= 0 && id < V));
  // A prompt longer than the block keeps its last T tokens.
  const std::vector<std::int32_t> long_prompt(3 * T, 1);
  CHECK(model.generate(long_prompt, 2, {.temperature = 0.f}).size() == 2);
}

TEST_CASE("fit trains a language model after generate, and generate works after fit") {
  tf::model<lm<tf::repeat<2, tf::recompute<mlp_block>>>> model{4};
  model.compile(tf::optimizers::adam{.learning_rate = 1e-2}, logits_loss);
  std::vector<std::int32_t> tokens(300);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>((i * 3 + i / 5) % V);
  auto train = tf::data::lm_windows<T>(tokens, 1) | tf::data::batch<batch>;
  (void)model.generate(std::vector<std::int32_t>{1}, 3);
  const auto history = model.fit(train, {.epochs = 3, .verbose = 0});
  const auto& loss = history["loss"];
  CHECK(loss.back() < 0.5 * loss.front());
  CHECK(model.generate(std::vector<std::int32_t>{1, 2}, 5).size() == 5);
}

TEST_CASE("repeat's copies bind as one type, and their dropouts still draw distinct masks") {
  // One bound type for every copy: the block's executors compile once.
  using bound = tf::testing::bound_layer<tf::repeat<3, mlp_block>, tf::shape<T, D>, tf::layer_context<3, void, void>>;
  static_assert(std::is_same_v<bound::child<0>, bound::child<1>> && std::is_same_v<bound::child<1>, bound::child<2>>);

  // Two copies of a block that only drops: with one mask shared, half the
  // elements would survive both; with two independent masks, a quarter.
  constexpr std::size_t n = 4096;
  using spec = tf::repeat<2, tf::sequential<tf::dropout<0.5f>>>;
  using layer = tf::testing::bound_layer<spec, tf::shape<n>, tf::layer_context<1, void, void>>;
  static_assert(std::is_same_v<layer::child<0>, layer::child<1>>);
  auto bytes = [](std::size_t per_sample, std::size_t per_step) {
    return std::vector<std::byte>(per_sample + per_step + 4 * tf::arena_alignment);
  };
  std::vector<std::byte> workspace = bytes(layer::workspace_bytes_per_sample, layer::workspace_bytes_per_step);
  std::vector<std::byte> scratch = bytes(layer::scratch_bytes_per_sample, layer::scratch_bytes_per_step);
  std::vector<float> in(n, 1.f), out(n, -1.f);
  tf::run_state run{.training = true, .seed = 5, .step = 1};
  tf::layer_io<tf::cpu> io;
  io.in = in.data();
  io.out = out.data();
  io.workspace = workspace.data();
  io.scratch = scratch.data();
  io.run = &run;
  io.salt = 1;
  tf::executor<spec, layer, 1, tf::cpu> executor(io);
  executor.forward();
  std::size_t survived = 0, wrong = 0;
  for (float y : out) {
    survived += y != 0.f;
    wrong += y != 0.f && y != 4.f;  // scaled by 2 in each copy
  }
  CHECK(wrong == 0);
  CHECK(survived > n / 5);
  CHECK(survived < 3 * n / 10);
}

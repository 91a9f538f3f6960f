// Mixed precision: policies bound into the network's type, 16-bit storage in
// the memory plan, dense's rounding, and Keras's loss scaling in the step.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <typeflow/typeflow.hpp>

#include "../support/test_support.hpp"
#include "../support/tiny_gpt.hpp"

namespace tf = typeflow;

namespace {

using mlp = tf::sequential<tf::input<64>, tf::dense<256>, tf::relu, tf::dropout<0.1f>, tf::dense<10, tf::float32>>;
using features = tf::data::tensor_value<float, tf::shape<64>>;
using label = tf::data::tensor_value<std::int32_t, tf::shape<>>;

template <int N>
tf::data::batch_of<N, features, label> toy_batch(std::uint64_t seed) {
  tf::data::batch_of<N, features, label> b;
  const tf::random_stream rng{seed, 0};
  for (int i = 0; i < N; ++i) {
    const int c = static_cast<int>((seed + i * 7u) % 10);
    b.labels[i] = c;
    for (int j = 0; j < 64; ++j)
      b.features[i * 64 + j] = (j % 10 == c ? 1.f : 0.f) + 0.5f * (2.f * rng.uniform(i * 64 + j) - 1.f);
  }
  b.valid = N;
  return b;
}

bool representable_in_bf16(float x) { return (std::bit_cast<std::uint32_t>(x) & 0xffffu) == 0; }
bool representable_in_f16(float x) { return static_cast<float>(tf::f16(x)) == x; }

}  // namespace

TEST_CASE("a policy decides each layer's compute dtype and which outputs are stored in 16 bits") {
  using bf = mlp::under<tf::mixed_bfloat16>;
  // dense<256> computes in bfloat16 and, since relu, dropout and the last
  // dense read 16 bits, stores its output in 16 bits; relu and dropout keep it.
  static_assert(std::is_same_v<bf::layer<1>::compute_dtype, tf::bfloat16>);
  static_assert(std::is_same_v<bf::layer<1>::output_dtype, tf::bfloat16>);
  static_assert(std::is_same_v<bf::layer<2>::output_dtype, tf::bfloat16>);
  static_assert(std::is_same_v<bf::layer<3>::output_dtype, tf::bfloat16>);
  // The override: dense<10, float32> computes in float32 and hands float32 to the loss.
  static_assert(std::is_same_v<bf::layer<4>::compute_dtype, tf::float32>);
  static_assert(std::is_same_v<bf::layer<4>::output_dtype, tf::float32>);
  // float32 everywhere under the float32 policy (the plain sequential).
  static_assert(std::is_same_v<mlp::layer<1>::compute_dtype, tf::float32>);
  static_assert(std::is_same_v<mlp::layer<1>::output_dtype, tf::float32>);
  // A layer that reads only float32 gets float32: dense before layer_norm
  // still computes in float16 but stores float32.
  using with_norm = tf::sequential<tf::input<8>, tf::dense<8>, tf::relu, tf::layer_norm, tf::dense<4, tf::float32>>::
      under<tf::mixed_float16>;
  static_assert(std::is_same_v<with_norm::layer<1>::compute_dtype, tf::float16>);
  static_assert(std::is_same_v<with_norm::layer<1>::output_dtype, tf::float32>);
  static_assert(std::is_same_v<with_norm::layer<3>::compute_dtype, tf::float32>);
  // Parameters do not move: the same layout under every policy.
  static_assert(bf::parameter_floats == mlp::parameter_floats);
}

TEST_CASE("the memory plan halves the bytes of activations stored in 16 bits") {
  constexpr int batch = 32;
  using f32_plan = tf::memory_plan<mlp, batch>;
  using bf_plan = tf::memory_plan<mlp::under<tf::mixed_bfloat16>, batch>;
  using f16_plan = tf::memory_plan<mlp::under<tf::mixed_float16>, batch>;
  // dense<256> (relu shares its buffer) and dropout: 256 values per sample each.
  for (std::size_t layer : {std::size_t{1}, std::size_t{3}}) {
    CHECK(bf_plan::output_bytes(layer) * 2 == f32_plan::output_bytes(layer));
    CHECK(f16_plan::output_bytes(layer) * 2 == f32_plan::output_bytes(layer));
  }
  // The input and the float32 logits keep their size.
  CHECK(bf_plan::output_bytes(0) == f32_plan::output_bytes(0));
  CHECK(bf_plan::output_bytes(4) == f32_plan::output_bytes(4));
  CHECK(f32_plan::activation_bytes - bf_plan::activation_bytes == 2 * batch * 256 * 2);
  // The parameters' place does not depend on the policy.
  CHECK(bf_plan::activations_offset == f32_plan::activations_offset);
}

TEST_CASE("dense rounds its input, weights and output to the compute dtype") {
  // y = x * 1 + 0 for x = 1 + 2^-10: float16 holds x exactly (10 fraction
  // bits), bfloat16 (7 bits) rounds it to 1, float32 keeps it.
  using net = tf::sequential<tf::input<1>, tf::dense<1>, tf::dense<1, tf::float32>>;
  const float x = 1.f + 1.f / 1024.f;
  auto run = [&](auto& model) {
    model.parameter("layers.1.kernel")[0] = 1.f;
    model.parameter("layers.2.kernel")[0] = 1.f;
    auto data = tf::data::from_tensor_slices<tf::shape<1>>(std::vector<float>{x}, std::vector<std::int32_t>{0}) |
                tf::data::batch<1>;
    return model.predict(data).at(0);
  };
  tf::model<net> f32;
  tf::model<net, tf::mixed_float16> f16;
  tf::model<net, tf::mixed_bfloat16> bf16;
  CHECK(run(f32) == x);
  CHECK(run(f16) == x);
  CHECK(run(bf16) == 1.f);
  // A weight bfloat16 cannot hold is rounded for the product, the master copy is kept.
  bf16.parameter("layers.1.kernel")[0] = 1.f + 1.f / 512.f;  // rounds to 1 (tie to even)
  auto data = tf::data::from_tensor_slices<tf::shape<1>>(std::vector<float>{2.f}, std::vector<std::int32_t>{0}) |
              tf::data::batch<1>;
  CHECK(bf16.predict(data).at(0) == 2.f);
  CHECK(bf16.parameter("layers.1.kernel")[0] == 1.f + 1.f / 512.f);
}

TEST_CASE("under mixed_bfloat16 a 16-bit dense writes gradients bfloat16 can hold, a float32 one does not") {
  tf::model<mlp, tf::mixed_bfloat16> model{4};
  model.compile(tf::optimizers::sgd{.learning_rate = 0.01}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  model.train_on_batch(toy_batch<32>(1));
  const auto hidden = model.gradient("layers.1.kernel");
  const auto logits = model.gradient("layers.4.kernel");
  std::size_t nonzero = 0, outside_bf16 = 0;
  for (float g : hidden) {
    nonzero += g != 0.f;
    CHECK(representable_in_bf16(g));
  }
  for (float g : logits) outside_bf16 += !representable_in_bf16(g);
  CHECK(nonzero > hidden.size() / 4);
  CHECK(outside_bf16 > logits.size() / 2);
}

TEST_CASE("mixed policies train the MLP as well as float32 on a toy problem") {
  auto accuracy_after_training = [](auto& model) {
    model.compile(tf::optimizers::adam{.learning_rate = 1e-3}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                  tf::metrics::accuracy{});
    for (int step = 0; step < 60; ++step) model.train_on_batch(toy_batch<32>(100 + step));
    std::vector<float> x;
    std::vector<std::int32_t> y;
    const auto test = toy_batch<64>(9999);
    auto data = tf::data::from_tensor_slices<tf::shape<64>>(test.features, test.labels) | tf::data::batch<64>;
    return model.evaluate(data).at("accuracy");
  };
  tf::model<mlp> f32{7};
  tf::model<mlp, tf::mixed_bfloat16> bf16{7};
  tf::model<mlp, tf::mixed_float16> f16{7};
  const double a32 = accuracy_after_training(f32), abf = accuracy_after_training(bf16), a16 = accuracy_after_training(f16);
  MESSAGE("toy accuracy: float32 " << a32 << ", mixed_bfloat16 " << abf << ", mixed_float16 " << a16);
  CHECK(a32 > 0.9);
  CHECK(abf > a32 - 0.05);
  CHECK(a16 > a32 - 0.05);
  CHECK(f16.skipped_steps() == 0);
  CHECK(f16.loss_scale() == 32768.f);
}

TEST_CASE("an overflowing float16 step is skipped: the weights stay, the scale halves") {
  // With the loss scaled by 2^15, a kernel gradient of x * d_out * 2^15 with
  // x = 8 passes float16's largest value, 65504, and becomes infinite.
  using net = tf::sequential<tf::input<2>, tf::dense<2>, tf::dense<2, tf::float32>>;
  tf::model<net, tf::mixed_float16> model{1};
  model.compile(tf::optimizers::sgd{.learning_rate = 0.1}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  using batch = tf::data::batch_of<1, tf::data::tensor_value<float, tf::shape<2>>, label>;
  batch big;
  big.features = {8.f, -8.f};
  big.labels = {1};
  big.valid = 1;
  const std::vector<float> before(model.parameter_region().begin(), model.parameter_region().end());
  CHECK(model.loss_scale() == 32768.f);
  model.train_on_batch(big);
  CHECK(model.skipped_steps() == 1);
  CHECK(model.loss_scale() == 16384.f);
  CHECK(model.iterations() == 0);
  const std::vector<float> after(model.parameter_region().begin(), model.parameter_region().end());
  CHECK(after == before);
  // The scale keeps halving until the gradients fit, then the step applies.
  for (int i = 0; i < 8 && model.iterations() == 0; ++i) model.train_on_batch(big);
  CHECK(model.iterations() == 1);
  CHECK(model.loss_scale() < 16384.f);
  const std::vector<float> updated(model.parameter_region().begin(), model.parameter_region().end());
  CHECK(updated != before);
}

TEST_CASE("loss scaling keeps small float16 gradients that would underflow, and matches float32's updates") {
  // Inputs and weights with few bits, so that every forward value is exact
  // in float16 and float32 alike; targets 2^-24 from the predictions. The
  // gradient reaching the float16 layer is then ~2^-26, below half of
  // float16's smallest subnormal (2^-24): zero unless the loss is scaled.
  using net = tf::sequential<tf::input<4>, tf::dense<4>, tf::dense<1, tf::float32>>;
  using batch = tf::data::batch_of<8, tf::data::tensor_value<float, tf::shape<4>>, tf::data::tensor_value<float, tf::shape<1>>>;
  batch b;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) b.features[i * 4 + j] = static_cast<float>((i + j) % 4 + 1) / 8.f;
  b.valid = 8;
  auto set_weights = [](auto& model) {
    auto w1 = model.parameter("layers.1.kernel");
    for (std::size_t i = 0; i < w1.size(); ++i) w1[i] = static_cast<float>(static_cast<int>((i * 3) % 5) - 2) / 16.f;
    auto w2 = model.parameter("layers.2.kernel");
    const float second[] = {0.5f, -0.25f, 0.125f, 0.75f};
    for (std::size_t i = 0; i < w2.size(); ++i) w2[i] = second[i];
  };
  tf::model<net> reference;
  set_weights(reference);
  const auto predictions = reference.predict(
      tf::data::from_tensor_slices<tf::shape<4>>(b.features, std::vector<float>(8)) | tf::data::batch<8>);
  for (int i = 0; i < 8; ++i) b.labels[i] = predictions[i] + (i % 2 ? 1.f : -1.f) * std::ldexp(1.f, -24);

  auto first_layer_update = [&](auto& model) {
    set_weights(model);
    model.compile(tf::optimizers::sgd{.learning_rate = 1.0}, tf::losses::mean_squared_error{});
    const auto kernel = model.parameter("layers.1.kernel");
    const std::vector<float> before(kernel.begin(), kernel.end());
    model.train_on_batch(b);
    std::vector<float> update;
    const auto after = model.parameter("layers.1.kernel");
    for (std::size_t i = 0; i < before.size(); ++i) update.push_back(after[i] - before[i]);
    return update;
  };
  tf::model<net> f32;
  tf::model<net, tf::mixed_float16> scaled, unscaled;
  unscaled.set_loss_scale(tf::precision::fixed_loss_scale{1.f});
  const auto u32 = first_layer_update(f32), u_scaled = first_layer_update(scaled), u_unscaled = first_layer_update(unscaled);
  float largest = 0.f;
  for (float u : u32) largest = std::max(largest, std::fabs(u));
  REQUIRE(largest > 0.f);
  for (std::size_t i = 0; i < u32.size(); ++i) {
    // Scaled, the gradients are normal float16 numbers (11 significant bits).
    CHECK(std::fabs(u_scaled[i] - u32[i]) <= 1e-3f * largest);
    CHECK(u_unscaled[i] == 0.f);  // underflowed to zero without scaling
  }
  CHECK(scaled.skipped_steps() == 0);
  CHECK(unscaled.skipped_steps() == 0);
}

TEST_CASE("fit reports the loss scale and skipped steps in History under mixed_float16") {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  for (int s = 0; s < 4; ++s) {
    const auto b = toy_batch<32>(50 + s);
    x.insert(x.end(), b.features.begin(), b.features.end());
    y.insert(y.end(), b.labels.begin(), b.labels.end());
  }
  auto data = tf::data::from_tensor_slices<tf::shape<64>>(x, y) | tf::data::batch<32>;
  tf::model<mlp, tf::mixed_float16> model{5};
  model.compile(tf::optimizers::adam{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const auto history = model.fit(data, {.epochs = 2, .verbose = 0});
  CHECK(history["loss_scale"] == std::vector<double>{32768.0, 32768.0});
  CHECK(history["skipped_steps"] == std::vector<double>{0.0, 0.0});
  CHECK(history.warnings.empty());
  // float32 and bfloat16 do not scale: no such entries.
  tf::model<mlp, tf::mixed_bfloat16> bf16{5};
  bf16.compile(tf::optimizers::adam{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  CHECK_THROWS_AS(bf16.fit(data, {.verbose = 0})["loss_scale"], std::out_of_range);
}

TEST_CASE("mixed_float16 fit whose every update is skipped says so in History and on stderr, per epoch") {
  // NaN in every sample: each step's gradients are NaN, so each is skipped and
  // the scale halves; fit goes on (Keras's LossScaleOptimizer does) but warns.
  std::vector<float> x(4 * 32 * 64, std::numeric_limits<float>::quiet_NaN());
  std::vector<std::int32_t> y(4 * 32, 1);
  auto data = tf::data::from_tensor_slices<tf::shape<64>>(x, y) | tf::data::batch<32>;
  tf::model<mlp, tf::mixed_float16> model{5};
  model.compile(tf::optimizers::adam{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const std::vector<float> before(model.parameter_region().begin(), model.parameter_region().end());
  const auto history = model.fit(data, {.epochs = 2, .verbose = 0});
  CHECK(model.iterations() == 0);
  CHECK(model.skipped_steps() == 8);
  CHECK(std::equal(before.begin(), before.end(), model.parameter_region().begin()));
  REQUIRE(history.warnings.size() == 2);
  CHECK(history.warnings[0] ==
        "fit: epoch 1 applied no update: all 4 were skipped for non-finite gradients under mixed_float16 (loss scale "
        "now 2048), so the weights did not change; look for NaN or Inf in the data or a loss that diverges");
  CHECK(history.warnings[1].starts_with("fit: epoch 2 applied no update: all 4 were skipped"));
  CHECK(history.warnings[1].find("loss scale now 128)") != std::string::npos);

  // One good batch among them is an update: its epoch has no warning.
  for (int j = 0; j < 32 * 64; ++j) x[j] = 0.25f * static_cast<float>(j % 7);
  auto mostly_bad = tf::data::from_tensor_slices<tf::shape<64>>(x, y) | tf::data::batch<32>;
  tf::model<mlp, tf::mixed_float16> other{5};
  other.compile(tf::optimizers::adam{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const auto mixed = other.fit(mostly_bad, {.epochs = 1, .verbose = 0});
  CHECK(other.iterations() == 1);
  CHECK(mixed.warnings.empty());
}

TEST_CASE("summary shows the policy, each layer's compute dtype and its output bytes") {
  char buffer[4096] = {};
  std::FILE* out = fmemopen(buffer, sizeof buffer - 1, "w");
  REQUIRE(out != nullptr);
  tf::model<mlp, tf::mixed_bfloat16> model;
  model.summary(out);
  std::fclose(out);
  const std::string text = buffer;
  CHECK(text.find("policy: mixed_bfloat16") != std::string::npos);
  const auto hidden = text.find("layers.1 (dense<256>)");
  REQUIRE(hidden != std::string::npos);
  const std::string hidden_line = text.substr(hidden, text.find('\n', hidden) - hidden);
  CHECK(hidden_line.find("bfloat16") != std::string::npos);
  CHECK(hidden_line.find("512 B") != std::string::npos);  // 256 values of 2 bytes
  const auto logits = text.find("layers.4 (dense<10, float32>)");
  REQUIRE(logits != std::string::npos);
  CHECK(text.substr(logits, text.find('\n', logits) - logits).find("float32") != std::string::npos);
  CHECK(text.find("shared") != std::string::npos);  // the fused relu
}

TEST_CASE("16-bit rounding helpers round to nearest even and keep infinities and NaN") {
  std::vector<float> v{1.f + 1.f / 1024.f, 1.f + 3.f / 256.f, 70000.f, -1e-9f, INFINITY, NAN, 65504.f, 1e-8f, 3e-8f};
  auto f16 = v, bf = v;
  tf::precision::round_in_place<tf::float16>(f16.data(), f16.size());
  tf::precision::round_in_place<tf::bfloat16>(bf.data(), bf.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) {
      CHECK(std::isnan(f16[i]));
      CHECK(std::isnan(bf[i]));
      continue;
    }
    CHECK(f16[i] == static_cast<float>(tf::f16(v[i])));
    CHECK(bf[i] == static_cast<float>(tf::bf16(v[i])));
    CHECK(representable_in_f16(f16[i]));
    CHECK(representable_in_bf16(bf[i]));
  }
  // round_into gives the same values without touching its input.
  std::vector<float> f16_into(v.size()), bf_into(v.size());
  const auto original = v;
  tf::precision::round_into<tf::float16>(v.data(), f16_into.data(), v.size());
  tf::precision::round_into<tf::bfloat16>(v.data(), bf_into.data(), v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) continue;
    CHECK(f16_into[i] == f16[i]);
    CHECK(bf_into[i] == bf[i]);
    CHECK(v[i] == original[i]);
  }
  CHECK(f16[2] == INFINITY);  // past 65504
  CHECK(f16[7] == 0.f);       // below half the smallest subnormal
  CHECK(bf[0] == 1.f);
  // A long array takes the threaded path and gives the same values.
  std::vector<float> long_array(100000);
  const tf::random_stream rng{9, 0};
  for (std::size_t i = 0; i < long_array.size(); ++i) long_array[i] = 1000.f * (rng.uniform(i) - 0.5f);
  auto rounded = long_array;
  tf::precision::round_in_place<tf::float16>(rounded.data(), rounded.size());
  for (std::size_t i = 0; i < long_array.size(); i += 997) CHECK(rounded[i] == static_cast<float>(tf::f16(long_array[i])));
}

TEST_CASE("the MNIST MLP reaches float32's test accuracy within 0.5 points under both mixed policies") {
  // The example's model (examples/mnist_mlp.cpp) without dropout, 1 epoch
  // of Adam at batch 128, the same seed and shuffle under each policy.
  using net = tf::sequential<tf::input<28, 28>, tf::flatten, tf::dense<512>, tf::relu, tf::dense<512>, tf::relu,
                             tf::dense<10, tf::float32>>;
  const auto dir = tf::testing::require_data("mnist", "setup_mnist");
  auto train = tf::data::mnist(dir, tf::data::split::train) | tf::data::map(tf::data::scale(1.f / 255)) |
               tf::data::shuffle(60'000, 42) | tf::data::batch<128>;
  auto test = tf::data::mnist(dir, tf::data::split::test) | tf::data::map(tf::data::scale(1.f / 255)) |
              tf::data::batch<500>;
  auto test_accuracy = [&](auto& model) {
    model.compile(tf::optimizers::adam{.learning_rate = 1e-3f},
                  tf::losses::sparse_categorical_crossentropy{.from_logits = true}, tf::metrics::accuracy{});
    model.fit(train, {.epochs = 1, .verbose = 0});
    return model.evaluate(test).at("accuracy");
  };
  tf::model<net> f32{42};
  tf::model<net, tf::mixed_bfloat16> bf16{42};
  tf::model<net, tf::mixed_float16> f16{42};
  const double a32 = test_accuracy(f32), abf = test_accuracy(bf16), a16 = test_accuracy(f16);
  MESSAGE("MNIST test accuracy after 1 epoch: float32 " << a32 << ", mixed_bfloat16 " << abf << ", mixed_float16 "
                                                         << a16 << " (loss scale " << f16.loss_scale() << ", "
                                                         << f16.skipped_steps() << " skipped)");
  CHECK(a32 > 0.95);
  CHECK(std::fabs(abf - a32) <= 0.005);
  CHECK(std::fabs(a16 - a32) <= 0.005);
}

namespace {
constexpr int T = 6, D = 8, V = 11;
using toy = tf::testing::tiny_gpt<T, D, V>;
using gpt_block = toy::block;
template <class Blocks>
using gpt = toy::net<Blocks>;

auto token_batch(std::uint64_t salt) { return toy::token_batch(7 + salt); }
}  // namespace

TEST_CASE("inside residual, repeat and recompute, dense layers compute and store in 16 bits too") {
  using bf = gpt<tf::repeat<2, gpt_block>>::under<tf::mixed_bfloat16>;
  // layer 3 is repeat<2, block>; in a block, child 1 is the MLP residual, whose
  // children are layer_norm, dense<4D>, gelu, dense<D>.
  using mlp = bf::layer<3>::child<0>::child<1>;
  static_assert(std::is_same_v<mlp::child<1>::compute_dtype, tf::bfloat16>);
  static_assert(std::is_same_v<mlp::child<1>::output_dtype, tf::bfloat16>);  // gelu and dense<D> read 16 bits
  static_assert(std::is_same_v<mlp::child<2>::output_dtype, tf::bfloat16>);  // gelu keeps it
  static_assert(std::is_same_v<mlp::child<3>::compute_dtype, tf::bfloat16>);
  static_assert(std::is_same_v<mlp::child<3>::output_dtype, tf::float32>);   // added to the float32 skip path
  static_assert(std::is_same_v<bf::layer<3>::compute_dtype, tf::bfloat16>);
  static_assert(std::is_same_v<bf::layer<5>::compute_dtype, tf::bfloat16>);  // tied_logits: a 16-bit product
  static_assert(std::is_same_v<bf::layer<5>::output_dtype, tf::float32>);    // whose logits the loss reads in float32
  // What a step keeps: per block, dense<4D>'s and gelu's outputs (B*T*4D
  // values each) shrink by 2 bytes a value. The bf16 operands of the native
  // products are kept from forward to backward in the layers' workspaces:
  // the kernels, attention's x and y, dense<4D>'s input (float32 from
  // layer_norm; dense<D> reads gelu's bf16 output as it is), and the tied
  // head's matrix and input. The emulated path's rounded copies live in the
  // shared scratch, which grows instead.
  constexpr int B = 4;
  using f32_plan = tf::memory_plan<gpt<tf::repeat<2, gpt_block>>, B>;
  using bf_plan = tf::memory_plan<bf, B>;
  constexpr std::size_t saved = 2 * 2 * (B * T * 4 * D) * 2;
  using attention = bf::layer<3>::child<0>::child<0>::child<1>;
  using dense_4d = mlp::child<1>;
  using dense_d = mlp::child<3>;
  using head = bf::layer<5>;
  static_assert(dense_4d::keeps_bf16_input && !dense_d::keeps_bf16_input);
  constexpr std::size_t kept_bf16 =
      2 * (B * (attention::kept_bf16_bytes_per_sample + dense_4d::workspace_bytes_per_sample) +
           attention::kept_bf16_bytes_per_step + dense_4d::workspace_bytes_per_step + dense_d::workspace_bytes_per_step) +
      B * head::workspace_bytes_per_sample + head::workspace_bytes_per_step;
  CHECK(bf_plan::kept_activation_bytes + saved == f32_plan::kept_activation_bytes + kept_bf16);
  CHECK(bf_plan::scratch_bytes > f32_plan::scratch_bytes);
}

TEST_CASE("a small GPT trains and generates under mixed_bfloat16 and mixed_float16, close to float32") {
  auto losses = [](auto& model) {
    model.compile(tf::optimizers::adam{.learning_rate = 1e-2}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
    std::vector<double> out;
    for (int step = 0; step < 150; ++step) out.push_back(model.train_on_batch(token_batch(step % 8)));
    return out;
  };
  tf::model<gpt<tf::repeat<2, tf::recompute<gpt_block>>>> f32{3};
  tf::model<gpt<tf::repeat<2, tf::recompute<gpt_block>>>, tf::mixed_bfloat16> bf16{3};
  tf::model<gpt<tf::repeat<2, tf::recompute<gpt_block>>>, tf::mixed_float16> f16{3};
  const auto l32 = losses(f32), lbf = losses(bf16), l16 = losses(f16);
  MESSAGE("loss after 150 steps: float32 " << l32.back() << ", mixed_bfloat16 " << lbf.back() << ", mixed_float16 "
                                         << l16.back());
  CHECK(l32.back() < 0.5 * l32.front());
  CHECK(std::fabs(lbf.front() - l32.front()) < 0.02 * l32.front());  // the same weights, rounded
  CHECK(std::fabs(l16.front() - l32.front()) < 0.005 * l32.front());
  CHECK(lbf.back() < 0.5 * lbf.front());
  CHECK(l16.back() < 0.5 * l16.front());
  CHECK(f16.skipped_steps() == 0);
  // The decoder is bound under the same policy.
  const std::vector<std::int32_t> prompt{1, 2, 3};
  const auto next = bf16.generate(prompt, 4, {.temperature = 0.f});
  REQUIRE(next.size() == 4);
  for (auto id : next) CHECK((id >= 0 && id < V));
}

TEST_CASE("for_each_block_as_float visits every element once, in blocks, below and above the threading threshold") {
  for (std::size_t n : {std::size_t{5}, std::size_t{4096}, std::size_t{10001}, std::size_t{100003}}) {
    std::vector<tf::bf16> stored(n);
    for (std::size_t i = 0; i < n; ++i) stored[i] = tf::bf16(static_cast<float>(i % 251));
    std::vector<int> visits(n, 0);
    std::vector<float> seen(n, -1.f);
    std::atomic<bool> oversized{false};  // no doctest assertion on the worker threads
    tf::precision::for_each_block_as_float<tf::bfloat16>(stored.data(), n, [&](float* block, std::size_t begin, std::size_t length) {
      if (length > 4096) oversized = true;
      for (std::size_t j = 0; j < length; ++j) {
        ++visits[begin + j];
        seen[begin + j] = block[j];
      }
    });
    CHECK_FALSE(oversized);
    CHECK(std::count(visits.begin(), visits.end(), 1) == static_cast<std::ptrdiff_t>(n));
    for (std::size_t i = 0; i < n; i += 13) CHECK(seen[i] == static_cast<float>(i % 251));
  }
}

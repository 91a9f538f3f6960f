// The bf16 copies of weights that native bf16 products keep from one step to
// the next (precision/weight_copies.hpp): the optimizer's pass writes them as
// it updates the weights (optimizers/update.hpp), and whatever else writes
// the weights makes them stale, so that no product reads an old weight.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <typeflow/typeflow.hpp>

#include "../support/tiny_gpt.hpp"

namespace tf = typeflow;

namespace {

using toy = tf::testing::tiny_gpt<6, 16, 13>;  // T, D, V
using block = toy::block;
template <class Blocks>
using gpt = toy::net<Blocks>;
// Per block: attention's qkv and proj kernels and the MLP's two kernels; and the tied head's matrix.
constexpr std::size_t copies_of_two_blocks = 2 * 4 + 1;

auto token_batch(std::uint64_t salt) { return toy::token_batch(11 + salt); }

bool native_products() {
  if (tf::backend::cpu::native_bf16_products()) return true;
  MESSAGE("skipped: this CPU or build has no native bf16 products (AVX512-BF16), so no layer keeps bf16 weight copies");
  return false;
}

// How many copies are current; each must hold its tensor in bf16, bit for bit.
template <class Model>
std::size_t check_current_copies(const Model& model) {
  const tf::precision::weight_copies& copies = model.weight_copies();
  std::size_t current = 0;
  for (std::size_t i = 0; i < copies.entries().size(); ++i) {
    if (copies.stale(i)) continue;
    ++current;
    const tf::precision::weight_copy& c = copies.entries()[i];
    std::vector<tf::bf16> fresh(c.count);
    tf::convert(c.source, fresh.data(), c.count);
    std::size_t differing = 0;
    for (std::size_t j = 0; j < c.count; ++j) differing += fresh[j].bits() != c.copy[j].bits();
    CHECK_MESSAGE(differing == 0, "copy " << i << ": " << differing << " of " << c.count << " values differ");
  }
  return current;
}

template <class Model>
void compile(Model& model) {
  model.compile(tf::optimizers::adamw{.learning_rate = 1e-2},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
}

}  // namespace

TEST_CASE("the optimizer's pass writes the bf16 weight copies: after each step every copy is current, bit for bit") {
  if (!native_products()) return;
  tf::model<gpt<tf::repeat<2, block>>, tf::mixed_bfloat16> model{5};
  compile(model);
  for (int step = 0; step < 4; ++step) {
    model.train_on_batch(token_batch(step));
    REQUIRE(model.weight_copies().entries().size() == copies_of_two_blocks);
    for (const auto& c : model.weight_copies().entries()) CHECK(c.optimizer_writes);
    CHECK(check_current_copies(model) == copies_of_two_blocks);
  }
}

TEST_CASE("training with kept bf16 weight copies matches converting them in every forward, bit for bit") {
  if (!native_products()) return;
  // `fresh` writes one weight before each step, as a callback might: that
  // makes every copy stale, so its forward converts them all again.
  tf::model<gpt<tf::repeat<2, block>>, tf::mixed_bfloat16> kept{9}, fresh{9};
  compile(kept);
  compile(fresh);
  auto touch = [](auto& model) {
    auto table = model.parameter("layers.1.embeddings");
    table[0] = table[0];
  };
  for (int step = 0; step < 6; ++step) {
    if (step == 3) {
      // A write to both models: the kept copies of the tied head's matrix
      // must not survive it.
      kept.parameter("layers.1.embeddings")[5] = 0.25f;
      fresh.parameter("layers.1.embeddings")[5] = 0.25f;
      CHECK(check_current_copies(kept) == 0);
    }
    touch(fresh);
    const double a = kept.train_on_batch(token_batch(step));
    const double b = fresh.train_on_batch(token_batch(step));
    CHECK(a == b);
  }
  const auto a = kept.parameter_region(), b = fresh.parameter_region();
  REQUIRE(a.size() == b.size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differing += a[i] != b[i];
  CHECK(differing == 0);
  // generate sets up the decoder's program (its layers register their
  // copies anew); training then sets its own up again, with fresh copies.
  const std::vector<std::int32_t> prompt{1, 2, 3};
  CHECK(kept.generate(prompt, 2, {.temperature = 0.f}) == fresh.generate(prompt, 2, {.temperature = 0.f}));
  CHECK(kept.train_on_batch(token_batch(7)) == fresh.train_on_batch(token_batch(7)));
  CHECK(check_current_copies(kept) == copies_of_two_blocks);
}

TEST_CASE("inside recompute<...> the bf16 weight copies are converted in every forward: their workspace is scratch") {
  if (!native_products()) return;
  tf::model<gpt<tf::repeat<2, tf::recompute<block>>>, tf::mixed_bfloat16> model{5};
  compile(model);
  for (int step = 0; step < 3; ++step) {
    model.train_on_batch(token_batch(step));
    REQUIRE(model.weight_copies().entries().size() == copies_of_two_blocks);
    // Only the tied head's copy, outside the recomputed blocks, lives from step to step.
    CHECK(check_current_copies(model) == 1);
  }
}

TEST_CASE("an optimizer that accumulates micro-batches leaves the bf16 weight copies stale when it updates") {
  if (!native_products()) return;
  tf::model<gpt<tf::repeat<2, block>>, tf::mixed_bfloat16> model{5};
  model.compile(tf::optimizers::accumulate<2>(tf::optimizers::adamw{.learning_rate = 1e-2}),
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  model.train_on_batch(token_batch(0));  // accumulates: the weights, and so the copies, stay
  CHECK(check_current_copies(model) == copies_of_two_blocks);
  model.train_on_batch(token_batch(1));  // updates without writing the copies
  CHECK(check_current_copies(model) == 0);
}

TEST_CASE("apply_update writes a tensor's bf16 copy as it updates it, and nothing on a refused step") {
  // Three tensors, the middle one with a copy; sizes not multiples of the
  // copy block, so that blocks end inside a tensor.
  const std::vector<tf::optimizers::parameter_tensor> tensors{
      {0, 37, tf::param_kind::kernel}, {48, 2500, tf::param_kind::kernel}, {2560, 5, tf::param_kind::bias}};
  const std::ptrdiff_t floats = 2576;
  std::vector<float> w(floats), g(floats), m(floats, 0.f), v(floats, 0.f);
  for (std::ptrdiff_t i = 0; i < floats; ++i) {
    w[static_cast<std::size_t>(i)] = std::sin(0.37f * static_cast<float>(i));
    g[static_cast<std::size_t>(i)] = std::cos(0.11f * static_cast<float>(i)) * 1e-2f;
  }
  const tf::bf16 untouched = tf::bf16::from_bits(0x7fc1);
  std::vector<tf::bf16> copy(2500, untouched);
  tf::bf16* copies[] = {nullptr, copy.data(), nullptr};
  float* slots[] = {m.data(), v.data()};
  int non_finite = 0;
  tf::optimizers::update_arguments a;
  a.weights = w.data();
  a.grads = g.data();
  a.slots = slots;
  a.floats = floats;
  a.tensors = tensors;
  a.non_finite = &non_finite;
  a.tensor_copies = copies;
  const tf::optimizers::adamw adamw{.learning_rate = 1e-2, .weight_decay = 0.1f};

  // A non-finite gradient: nothing changes, the copy included.
  g[40] = std::numeric_limits<float>::quiet_NaN();
  tf::optimizers::apply_update(adamw, a);
  CHECK(non_finite == 1);
  std::size_t written = 0;
  for (const auto& b : copy) written += b.bits() != untouched.bits();
  CHECK(written == 0);

  g[40] = 0.f;
  for (std::int64_t iteration = 1; iteration <= 2; ++iteration) {
    a.iteration = iteration;
    tf::optimizers::apply_update(adamw, a);
    CHECK(non_finite == 0);
    std::vector<tf::bf16> fresh(2500);
    tf::convert(w.data() + 48, fresh.data(), fresh.size());
    std::size_t differing = 0;
    for (std::size_t i = 0; i < fresh.size(); ++i) differing += fresh[i].bits() != copy[i].bits();
    CHECK(differing == 0);
  }
}

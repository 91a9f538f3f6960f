// Initializers follow Keras's variance-scaling definitions; layers take
// per-parameter overrides and regularizers as options.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;
namespace init = tf::initializers;

namespace {
struct moments {
  double mean = 0, stddev = 0, largest = 0;
};
template <class Initializer, class Shape>
moments draw(std::uint64_t seed = 1) {
  std::vector<float> w(Shape::size);
  Initializer::template fill<Shape>(w.data(), tf::random_stream{seed, 0});
  double sum = 0, squares = 0, largest = 0;
  for (float x : w) {
    sum += x;
    squares += double{x} * x;
    largest = std::max(largest, std::fabs(double{x}));
  }
  const double mean = sum / w.size();
  return {mean, std::sqrt(squares / w.size() - mean * mean), largest};
}
}  // namespace

TEST_CASE("uniform variance-scaling initializers stay within Keras's limits with the right spread") {
  using shape = tf::shape<300, 200>;  // fan_in 300, fan_out 200
  const auto glorot = draw<init::glorot_uniform, shape>();
  const double glorot_limit = std::sqrt(6.0 / 500);
  CHECK(glorot.largest <= glorot_limit);
  CHECK(glorot.stddev == doctest::Approx(glorot_limit / std::sqrt(3.0)).epsilon(0.02));
  const auto he = draw<init::he_uniform, shape>();
  CHECK(he.largest <= std::sqrt(6.0 / 300));
  CHECK(he.stddev == doctest::Approx(std::sqrt(2.0 / 300)).epsilon(0.02));
  const auto lecun = draw<init::lecun_uniform, shape>();
  CHECK(lecun.stddev == doctest::Approx(std::sqrt(1.0 / 300)).epsilon(0.02));
}

TEST_CASE("normal variance-scaling initializers are truncated at two standard deviations and keep the variance") {
  using shape = tf::shape<300, 200>;
  const double glorot_sd = std::sqrt(2.0 / 500), he_sd = std::sqrt(2.0 / 300), lecun_sd = std::sqrt(1.0 / 300);
  const auto glorot = draw<init::glorot_normal, shape>();
  CHECK(glorot.stddev == doctest::Approx(glorot_sd).epsilon(0.02));
  CHECK(glorot.largest <= 2 * glorot_sd / 0.87962566103423978 + 1e-6);
  const auto he = draw<init::he_normal, shape>();
  CHECK(he.stddev == doctest::Approx(he_sd).epsilon(0.02));
  const auto lecun = draw<init::lecun_normal, shape>();
  CHECK(lecun.stddev == doctest::Approx(lecun_sd).epsilon(0.02));
  CHECK(std::fabs(lecun.mean) < 0.01 * lecun_sd * 10);
}

TEST_CASE("truncated_normal, zeros and ones give what their names say") {
  const auto t = draw<init::truncated_normal<0.05f, 1.f>, tf::shape<100000>>();
  CHECK(t.mean == doctest::Approx(1.0).epsilon(0.001));
  CHECK(t.largest <= 1.0 + 2 * 0.05 + 1e-6);
  // A normal truncated at 2 sigma keeps 0.8796 of its stddev (Keras does not rescale here).
  CHECK(t.stddev == doctest::Approx(0.05 * 0.87962566103423978).epsilon(0.02));
  std::vector<float> w(10, 5.f);
  init::zeros::fill<tf::shape<10>>(w.data(), {});
  CHECK(std::all_of(w.begin(), w.end(), [](float x) { return x == 0.f; }));
  init::ones::fill<tf::shape<10>>(w.data(), {});
  CHECK(std::all_of(w.begin(), w.end(), [](float x) { return x == 1.f; }));
}

TEST_CASE("a dense layer takes per-parameter initializer overrides") {
  using net = tf::sequential<tf::input<400>,
                             tf::dense<100, tf::kernel_initializer<init::he_normal>, tf::bias_initializer<init::ones>>,
                             tf::dense<10>>;
  tf::model<net> model{3};
  double squares = 0;
  for (float x : model.parameter("layers.1.kernel")) squares += double{x} * x;
  CHECK(std::sqrt(squares / (400 * 100)) == doctest::Approx(std::sqrt(2.0 / 400)).epsilon(0.03));
  for (float b : model.parameter("layers.1.bias")) CHECK(b == 1.f);
  for (float b : model.parameter("layers.2.bias")) CHECK(b == 0.f);  // the default stays
}

TEST_CASE("kernel regularizers add their penalty to the loss, report it apart, and add its gradient") {
  using plain = tf::sequential<tf::input<4>, tf::dense<3>>;
  using regularized = tf::sequential<tf::input<4>, tf::dense<3, tf::kernel_regularizer<tf::regularizers::l1_l2<0.01f, 0.1f>>>>;
  tf::data::batch_of<2, tf::data::tensor_value<float, tf::shape<4>>, tf::data::tensor_value<std::int32_t, tf::shape<>>> batch;
  for (std::size_t i = 0; i < batch.features.size(); ++i) batch.features[i] = 0.1f * static_cast<float>(i);
  batch.labels = {0, 2};
  batch.valid = 2;
  tf::model<plain> a{5};
  tf::model<regularized> b{5};
  const tf::losses::sparse_categorical_crossentropy loss{.from_logits = true};
  a.compile(tf::optimizers::sgd{.learning_rate = 0.0}, loss);
  b.compile(tf::optimizers::sgd{.learning_rate = 0.0}, loss);
  const double plain_loss = a.train_on_batch(batch);
  const double total = b.train_on_batch(batch);
  double penalty = 0;
  const auto w = b.parameter("layers.1.kernel");
  for (float x : w) penalty += 0.01 * std::fabs(x) + 0.1 * double{x} * x;
  CHECK(total == doctest::Approx(plain_loss + penalty).epsilon(1e-6));
  const auto ga = a.gradient("layers.1.kernel"), gb = b.gradient("layers.1.kernel");
  for (std::size_t i = 0; i < w.size(); ++i)
    CHECK(gb[i] == doctest::Approx(ga[i] + 0.01f * (w[i] > 0 ? 1.f : -1.f) + 0.2f * w[i]).epsilon(1e-5));
  // The bias carries no regularizer: same gradient as without.
  CHECK(a.gradient("layers.1.bias")[0] == b.gradient("layers.1.bias")[0]);

  auto data = tf::data::from_tensor_slices<tf::shape<4>>(batch.features, batch.labels) | tf::data::batch<2>;
  const auto history = b.fit(data, {.epochs = 1, .verbose = 0});
  REQUIRE(history.contains("regularization_loss"));
  CHECK(history["regularization_loss"][0] == doctest::Approx(penalty).epsilon(1e-6));
  CHECK(b.evaluate(data).at("regularization_loss") == doctest::Approx(penalty).epsilon(1e-6));
  CHECK(!a.fit(data, {.epochs = 1, .verbose = 0}).contains("regularization_loss"));
}

TEST_CASE("normalization layers take gamma and beta initializer overrides") {
  using net = tf::sequential<tf::input<6>,
                             tf::batch_normalization<tf::batch_norm_options{}, tf::gamma_initializer<init::constant<0.5f>>>,
                             tf::layer_normalization<tf::layer_norm_options{}, tf::beta_initializer<init::ones>>>;
  tf::model<net> model{1};
  for (float g : model.parameter("layers.1.gamma")) CHECK(g == 0.5f);
  for (float b : model.parameter("layers.1.beta")) CHECK(b == 0.f);  // the default stays
  for (float g : model.parameter("layers.2.gamma")) CHECK(g == 1.f);
  for (float b : model.parameter("layers.2.beta")) CHECK(b == 1.f);
}

// The GPU applies the regularizers from a table (train/regularization.hpp's
// regularized_tensors, backend/cuda/regularization.hpp's kernel); replayed
// here element by element with the same per-weight functions, it gives the
// CPU's gradients to the bit and its penalty to double rounding.
TEST_CASE("regularized_tensors: the GPU's table of penalties replays the CPU's regularizers") {
  namespace reg = tf::regularizers;
  using net = tf::sequential<tf::input<6>, tf::dense<5, tf::kernel_regularizer<reg::l1_l2<0.01f, 0.1f>>>, tf::relu,
                             tf::dense<4>, tf::dense<3, tf::bias_regularizer<reg::l2<0.5f>>>>;
  using bound = tf::model<net>::bound_network;
  using plan = tf::memory_plan<bound, 0, 0>;
  const auto table = tf::regularized_tensors<bound>();
  REQUIRE(table.size() == 2);  // layer 1's kernel, layer 3's bias; the unregularized tensors are left out
  CHECK(table[0].size == 6 * tf::padded_row_length(5));  // the kernel as stored, rows padded
  CHECK(table[0].l1 == 0.01f);
  CHECK(table[0].l2 == 0.1f);
  CHECK(table[1].size == 3);
  CHECK(table[1].l1 == 0.f);
  CHECK(table[1].l2 == 0.5f);
  CHECK(table[1].offset > table[0].offset);

  std::vector<std::byte> arena(plan::gradients_offset + plan::trainable_bytes);
  auto* weights = reinterpret_cast<float*>(arena.data());
  auto* grads = reinterpret_cast<float*>(arena.data() + plan::gradients_offset);
  for (std::size_t i = 0; i < bound::parameter_floats; ++i) weights[i] = 0.37f * std::sin(1.3f * static_cast<float>(i));
  for (std::size_t i = 0; i < bound::trainable_floats; ++i) grads[i] = 0.01f * static_cast<float>(i % 7);
  std::vector<float> replayed(grads, grads + bound::trainable_floats);
  double replayed_penalty = 0;
  for (const auto& t : table)
    for (std::size_t i = 0; i < t.size; ++i) {
      const float w = weights[t.offset + i];
      replayed_penalty += reg::penalty_at(w, t.l1, t.l2);
      replayed[t.offset + i] += 1.f * reg::penalty_gradient(w, t.l1, t.l2);
    }
  const double penalty = tf::apply_regularizers<bound>(arena.data(), true);
  CHECK(penalty == doctest::Approx(replayed_penalty).epsilon(1e-12));
  CHECK(penalty > 0);
  CHECK(std::equal(replayed.begin(), replayed.end(), grads));
}

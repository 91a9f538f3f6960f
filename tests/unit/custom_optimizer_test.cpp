// An optimizer is one file: its options, validate(), slot_count() and its
// per-element rule. This one (Adagrad, with zero-initialised accumulators) is
// defined here and nowhere else, and trains a model through the generic
// update (optimizers::apply_update): clipping, weight decay, schedules and
// accumulate<K> come with it. (Its rule would run on the GPU as well, marked
// TYPEFLOW_HOST_DEVICE: make_device_optimizer takes any rule_optimizer.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;
namespace opt = typeflow::optimizers;

namespace {

// a += g^2;  w -= lr * g / (sqrt(a) + epsilon)
struct adagrad_rule {
  float lr = 0.f, epsilon = 0.f;
  TYPEFLOW_HOST_DEVICE auto slots() const { return opt::slots_with<1>(); }  // the accumulator a
  TYPEFLOW_HOST_DEVICE void operator()(float& w, float g, float* s) const {
    float& a = s[0];
    a += g * g;
    w -= lr * g / (std::sqrt(a) + epsilon);
  }
};

struct adagrad {
  tf::schedules::learning_rate learning_rate = 0.01;
  float epsilon = 1e-7f;
  float weight_decay = 0.f;
  opt::decay_scope weight_decay_applies_to = opt::decay_scope::all;
  std::optional<float> clipnorm{}, clipvalue{}, global_clipnorm{};

  static constexpr std::string_view name = "adagrad";
  int slot_count() const { return 1; }
  void validate() const { opt::check_common_options(*this); }
  adagrad_rule rule(std::int64_t iteration) const {
    return {static_cast<float>(opt::current_learning_rate(*this, iteration)), epsilon};
  }
  void update(const opt::update_arguments& a) const { opt::apply_update(*this, a); }
};

static_assert(opt::rule_optimizer<adagrad>);
static_assert(opt::optimizer<adagrad>);
static_assert(opt::fixed_slots<adagrad_rule>() == 1);
static_assert(!opt::rule_optimizer<opt::accumulated<2, adagrad>>);  // the wrapper gives no rule of its own

using net = tf::sequential<tf::input<12>, tf::dense<16>, tf::tanh, tf::dense<4>>;
using features = tf::data::tensor_value<float, tf::shape<12>>;
using label = tf::data::tensor_value<std::int32_t, tf::shape<>>;

// Four classes, told apart by which of the first four features is largest.
tf::data::batch_of<32, features, label> make_batch(int index) {
  const tf::random_stream rng{91, static_cast<std::uint64_t>(index)};
  tf::data::batch_of<32, features, label> b;
  for (int i = 0; i < 32 * 12; ++i) b.features[i] = 2.f * rng.uniform(i) - 1.f;
  for (int r = 0; r < 32; ++r) {
    int best = 0;
    for (int c = 1; c < 4; ++c)
      if (b.features[r * 12 + c] > b.features[r * 12 + best]) best = c;
    b.labels[r] = best;
  }
  b.valid = 32;
  return b;
}

template <class Optimizer>
double mean_loss_after_training(const Optimizer& optimizer, int steps) {
  tf::model<net> model{5};
  model.compile(optimizer, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  double last = 0;
  for (int step = 0; step < steps; ++step) {
    const double loss = model.train_on_batch(make_batch(step % 8));
    if (step >= steps - 8) last += loss / 8;
  }
  return last;
}

}  // namespace

TEST_CASE("an optimizer defined in one file applies its rule after clipping and decay, element by element") {
  const std::vector<opt::parameter_tensor> tensors = {{0, 3, tf::param_kind::kernel}, {4, 2, tf::param_kind::bias}};
  const adagrad o{.learning_rate = 0.5, .weight_decay = 0.1f, .weight_decay_applies_to = opt::decay_scope::kernels,
                  .clipvalue = 1.f};
  o.validate();
  std::vector<float> w = {1.f, -2.f, 0.5f, 0.f, 3.f, -1.f}, g = {0.5f, -4.f, 2.f, 0.f, 0.25f, 7.f}, a(6, 0.f);
  const std::vector<float> w0 = w, g0 = g;
  float* slots[1] = {a.data()};
  opt::update_arguments args;
  args.weights = w.data();
  args.grads = g.data();
  args.slots = slots;
  args.floats = 6;
  args.tensors = tensors;
  args.iteration = 1;
  o.update(args);
  for (int i = 0; i < 6; ++i) {
    CAPTURE(i);
    const float clipped = std::fmax(-1.f, std::fmin(1.f, g0[i]));
    const float decayed = i < 3 ? w0[i] * static_cast<float>(1.0 - 0.5 * 0.1f) : w0[i];  // kernels only
    const float expected_a = clipped * clipped;
    CHECK(a[i] == doctest::Approx(expected_a));
    CHECK(w[i] == doctest::Approx(decayed - 0.5f * clipped / (std::sqrt(expected_a) + 1e-7f)));
  }
  CHECK(w[3] == 0.f);  // padding: a zero gradient and zero state leave it as it is
  CHECK(a[3] == 0.f);
}

TEST_CASE("an optimizer defined in one file trains a model through the generic update, accumulated or not") {
  const double initial = std::log(4.0);  // four classes, near-uniform logits at the start
  const double trained = mean_loss_after_training(adagrad{.learning_rate = 0.1}, 120);
  INFO("mean loss of the last 8 steps: " << trained);
  CHECK(trained < 0.6 * initial);
  const double clipped = mean_loss_after_training(
      adagrad{.learning_rate = tf::schedules::cosine_decay{0.1, 120}, .weight_decay = 0.01f, .global_clipnorm = 1.f},
      120);
  CHECK(clipped < 0.7 * initial);
  // accumulate<2> runs the same generic update on the mean of two micro-batches.
  const double accumulated = mean_loss_after_training(opt::accumulate<2>(adagrad{.learning_rate = 0.1}), 240);
  CHECK(accumulated < 0.7 * initial);
}

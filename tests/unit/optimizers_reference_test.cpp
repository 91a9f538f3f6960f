// The optimizers against PyTorch: every optimizer, crossed with every kind of
// clipping and two schedules, trains a small MLP for 20 steps and must leave
// its parameters where tests/reference/optimizers.json says (written by
// tests/reference/optimizers_reference.py: torch autograd for the gradients,
// Keras 3's update rules written out in float32 torch ops), to a relative 1e-5.
// The fixture also holds what torch.optim's own Adam, SGD, RMSprop and
// clip_grad_norm_ give, and Keras's code taken literally in float32, where
// those differ from the rule. Then: the argument checks
// at compile(), and the default scope of decoupled weight decay.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <typeflow/typeflow.hpp>

#include "../support/reference_json.hpp"

namespace tf = typeflow;
namespace opt = typeflow::optimizers;
using json = nlohmann::json;

namespace {

using net = tf::sequential<tf::input<6>, tf::dense<8>, tf::tanh, tf::dense<3>>;
constexpr int batch_size = 8;
using batch_type = tf::data::batch_of<batch_size, tf::data::tensor_value<float, tf::shape<6>>,
                                      tf::data::tensor_value<std::int32_t, tf::shape<>>>;
using parameters = std::map<std::string, std::vector<float>>;

const json& reference() {
  static const json document = typeflow::testing::read_reference("optimizers.json");
  return document;
}

// The fixture's tolerance: |typeflow - torch| <= 1e-5 |torch| + 1e-7.
//
// The absolute floor is for values that training carries near zero (89 of
// the fixture's 6225 final values lie below 0.01 in magnitude, the smallest at
// 3e-4). Such a value is a sum of terms of the weights' own size (|w| up to
// 0.8, updates of 1e-3 .. 1e-2), so its float32 rounding is that of those
// terms, 6e-8 per operation at |w| = 0.5, not a fraction of the small result;
// 1e-7 is under two such roundings. It decides only below |torch| = 0.01.
// Without it one element fails: layers.3.kernel[17] of sgd_momentum/none/
// cosine ends at -3.5e-4, off by 5.6e-9 (1.6e-5 relative). The largest error
// anywhere is 1e-6, on a value of 0.3 (centered rmsprop with momentum).
constexpr double relative_tolerance = 1e-5;
constexpr double absolute_floor = 1e-7;

// The worst element of a comparison, in units of the allowance.
struct comparison {
  double worst = 0;           // max |a - b| / (tolerance |b| + floor): passes when <= 1
  double worst_relative = 0;  // max |a - b| / |b| over elements with |b| >= floor / tolerance
  double worst_absolute = 0;  // max |a - b|
  std::string where;          // the worst element, for the failure message
};

comparison compare(const std::vector<float>& actual, const json& expected, const std::string& name) {
  comparison c;
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i];
    const double b = expected[i].get<double>();
    const double error = std::fabs(a - b);
    const double units = error / (relative_tolerance * std::fabs(b) + absolute_floor);
    c.worst_absolute = std::max(c.worst_absolute, error);
    if (std::fabs(b) >= absolute_floor / relative_tolerance)
      c.worst_relative = std::max(c.worst_relative, error / std::fabs(b));
    if (units > c.worst || c.where.empty()) {
      c.worst = std::max(c.worst, units);
      std::ostringstream text;
      text.precision(9);
      text << name << "[" << i << "]: typeflow " << a << ", reference " << b << ", relative error "
           << (b != 0 ? error / std::fabs(b) : error);
      c.where = text.str();
    }
  }
  return c;
}

// --- building typeflow's optimizer from the fixture's fields ---------------------

tf::schedules::learning_rate schedule_from(const json& s) {
  const std::string kind = s.at("kind");
  if (kind == "constant") return s.at("learning_rate").get<double>();
  if (kind == "exponential_decay")
    return tf::schedules::exponential_decay{s.at("initial_learning_rate").get<double>(),
                                            s.at("decay_steps").get<std::int64_t>(), s.at("decay_rate").get<double>(),
                                            s.at("staircase").get<bool>()};
  if (kind == "cosine_decay")
    return tf::schedules::cosine_decay{s.at("initial_learning_rate").get<double>(),
                                       s.at("decay_steps").get<std::int64_t>(),
                                       {.alpha = s.at("alpha").get<double>(),
                                        .warmup_target = s.at("warmup_target").get<double>(),
                                        .warmup_steps = s.at("warmup_steps").get<std::int64_t>()}};
  throw std::runtime_error("optimizers.json: unknown schedule " + kind);
}

template <class Optimizer>
Optimizer with_clipping(Optimizer o, const json& clip) {
  if (clip.is_null()) return o;
  const std::string kind = clip.at("kind");
  const float value = clip.at("value").get<float>();
  if (kind == "clipnorm")
    o.clipnorm = value;
  else if (kind == "clipvalue")
    o.clipvalue = value;
  else if (kind == "global_clipnorm")
    o.global_clipnorm = value;
  else
    throw std::runtime_error("optimizers.json: unknown clipping " + kind);
  return o;
}

// Calls f with the typeflow optimizer, as its own type, that a configuration describes.
template <class F>
void with_optimizer(const json& config, F&& f) {
  const std::string kind = config.at("optimizer");
  const json& x = config.at("fields");
  const json& clip = config.at("clip");
  auto lr = schedule_from(config.at("schedule"));
  auto number = [&](const char* field) { return x.at(field).get<float>(); };
  auto flag = [&](const char* field) { return x.at(field).get<bool>(); };
  if (kind == "sgd") {
    f(with_clipping(opt::sgd{.learning_rate = lr,
                             .momentum = number("momentum"),
                             .nesterov = flag("nesterov"),
                             .weight_decay = number("weight_decay")},
                    clip));
  } else if (kind == "adam") {
    f(with_clipping(opt::adam{.learning_rate = lr,
                              .beta_1 = number("beta_1"),
                              .beta_2 = number("beta_2"),
                              .epsilon = number("epsilon"),
                              .amsgrad = flag("amsgrad"),
                              .weight_decay = number("weight_decay")},
                    clip));
  } else if (kind == "adamw") {
    f(with_clipping(opt::adamw{.learning_rate = lr,
                               .weight_decay = number("weight_decay"),
                               .beta_1 = number("beta_1"),
                               .beta_2 = number("beta_2"),
                               .epsilon = number("epsilon"),
                               .amsgrad = flag("amsgrad")},
                    clip));
  } else if (kind == "lion") {
    f(with_clipping(opt::lion{.learning_rate = lr,
                              .beta_1 = number("beta_1"),
                              .beta_2 = number("beta_2"),
                              .weight_decay = number("weight_decay")},
                    clip));
  } else if (kind == "rmsprop") {
    f(with_clipping(opt::rmsprop{.learning_rate = lr,
                                 .rho = number("rho"),
                                 .momentum = number("momentum"),
                                 .epsilon = number("epsilon"),
                                 .centered = flag("centered"),
                                 .weight_decay = number("weight_decay")},
                    clip));
  } else {
    throw std::runtime_error("optimizers.json: unknown optimizer " + kind);
  }
}

// --- the training run ---------------------------------------------------------

const std::vector<batch_type>& batches() {
  static const std::vector<batch_type> all = [] {
    const json& doc = reference();
    const json& features = doc.at("features");
    const json& labels = doc.at("labels");
    std::vector<batch_type> out(features.size());
    for (std::size_t b = 0; b < out.size(); ++b) {
      REQUIRE(features[b].size() == out[b].features.size());
      REQUIRE(labels[b].size() == out[b].labels.size());
      for (std::size_t i = 0; i < out[b].features.size(); ++i) out[b].features[i] = features[b][i].get<float>();
      for (std::size_t i = 0; i < out[b].labels.size(); ++i) out[b].labels[i] = labels[b][i].get<std::int32_t>();
      out[b].valid = batch_size;
    }
    return out;
  }();
  return all;
}

parameters train(const json& config) {
  const json& doc = reference();
  tf::model<net> model{0};
  for (const auto& [name, values] : doc.at("initial").items()) {
    const auto span = model.parameter(name);
    REQUIRE(span.size() == values.size());
    for (std::size_t i = 0; i < span.size(); ++i) span[i] = values[i].get<float>();
  }
  with_optimizer(config, [&](auto optimizer) {
    model.compile(optimizer, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  });
  const auto steps = doc.at("steps").get<std::size_t>();
  REQUIRE(batches().size() == steps);
  for (const auto& batch : batches()) {
    const double loss = model.train_on_batch(batch);
    REQUIRE(std::isfinite(loss));
  }
  CHECK(model.iterations() == static_cast<std::int64_t>(steps));
  parameters out;
  for (const auto& [name, values] : doc.at("initial").items()) {
    const auto span = model.parameter(name);
    out[name] = std::vector<float>(span.begin(), span.end());
  }
  return out;
}

// The worst comparison over a run's tensors, each tensor checked.
comparison check_against(const parameters& actual, const json& expected) {
  comparison worst;
  REQUIRE(expected.size() == actual.size());
  for (const auto& [name, values] : expected.items()) {
    const auto c = compare(actual.at(name), values, name);
    CHECK_MESSAGE(c.worst <= 1.0, c.where);
    worst.worst_relative = std::max(worst.worst_relative, c.worst_relative);
    worst.worst_absolute = std::max(worst.worst_absolute, c.worst_absolute);
    if (c.worst >= worst.worst) {
      worst.worst = c.worst;
      worst.where = c.where;
    }
  }
  return worst;
}

// "adam_amsgrad/clipnorm/cosine" -> "adam_amsgrad"
std::string family(const json& config) {
  const std::string name = config.at("name");
  return name.substr(0, name.find('/'));
}

const std::set<std::string> families = {"sgd",          "sgd_momentum", "sgd_nesterov", "adam",    "adam_amsgrad",
                                        "adamw",        "lion",         "rmsprop",      "rmsprop_centered_momentum"};

// Runs every configuration of one family; TYPEFLOW_REFERENCE_REPORT=1 prints the worst errors.
void check_family(const std::string& wanted) {
  int runs = 0;
  double worst_relative = 0, worst_absolute = 0, worst_units = 0;
  for (const json& config : reference().at("configurations")) {
    if (family(config) != wanted) continue;
    const std::string name = config.at("name");
    INFO("configuration " << name);
    const auto c = check_against(train(config), config.at("final"));
    worst_relative = std::max(worst_relative, c.worst_relative);
    worst_absolute = std::max(worst_absolute, c.worst_absolute);
    worst_units = std::max(worst_units, c.worst);
    ++runs;
  }
  CHECK(runs >= 8);  // 4 clippings x 2 schedules
  if (std::getenv("TYPEFLOW_REFERENCE_REPORT"))
    std::printf("%-26s %2d runs: largest error: relative %.3g (where |ref| >= 0.01), absolute %.3g, "
                "%.3g x the allowance\n",
                wanted.c_str(), runs, worst_relative, worst_absolute, worst_units);
}

// Calls update directly on a kernel and a bias of two floats each.
struct two_tensors {
  std::vector<float> weights{1.f, -2.f, 1.f, -2.f};  // kernel, then bias
  std::vector<float> grads = std::vector<float>(4, 0.f);
  std::vector<std::vector<float>> state = std::vector<std::vector<float>>(3, std::vector<float>(4, 0.f));
  float* slots[3] = {state[0].data(), state[1].data(), state[2].data()};
  opt::parameter_tensor tensors[2] = {{0, 2, tf::param_kind::kernel}, {2, 2, tf::param_kind::bias}};

  template <class Optimizer>
  void step(const Optimizer& o, std::int64_t iteration = 1) {
    opt::update_arguments a;
    a.weights = weights.data();
    a.grads = grads.data();
    a.slots = slots;
    a.floats = 4;
    a.tensors = tensors;
    a.iteration = iteration;
    o.update(a);
  }
};

}  // namespace

TEST_CASE("optimizers.json covers every optimizer, clipping and schedule") {
  const json& configs = reference().at("configurations");
  std::set<std::string> seen_families, seen_clips, seen_schedules;
  for (const json& config : configs) {
    seen_families.insert(family(config));
    seen_clips.insert(config.at("clip").is_null() ? "none" : config.at("clip").at("kind").get<std::string>());
    seen_schedules.insert(config.at("schedule").at("kind").get<std::string>());
  }
  CHECK(seen_families == families);
  CHECK(seen_clips == std::set<std::string>{"none", "clipnorm", "clipvalue", "global_clipnorm"});
  CHECK(seen_schedules == std::set<std::string>{"constant", "cosine_decay", "exponential_decay"});
  CHECK(configs.size() == 9 * 4 * 2 + 3);
  CHECK(reference().at("relative_tolerance").get<double>() == relative_tolerance);
}

TEST_CASE("sgd matches PyTorch (Keras's rule) after 20 steps") { check_family("sgd"); }
TEST_CASE("sgd with momentum matches PyTorch (Keras's rule) after 20 steps") { check_family("sgd_momentum"); }
TEST_CASE("sgd with Nesterov momentum matches PyTorch (Keras's rule) after 20 steps") { check_family("sgd_nesterov"); }
TEST_CASE("adam matches PyTorch (Keras's rule) after 20 steps") { check_family("adam"); }
TEST_CASE("adam with amsgrad matches PyTorch (Keras's rule) after 20 steps") { check_family("adam_amsgrad"); }
TEST_CASE("adamw matches PyTorch (Keras's rule) after 20 steps") { check_family("adamw"); }
TEST_CASE("lion matches PyTorch (Keras's rule) after 20 steps") { check_family("lion"); }
TEST_CASE("rmsprop matches PyTorch (Keras's rule) after 20 steps") { check_family("rmsprop"); }
TEST_CASE("centered rmsprop with momentum matches PyTorch (Keras's rule) after 20 steps") {
  check_family("rmsprop_centered_momentum");
}

TEST_CASE("where torch.optim (or Keras's float32 rounding) differs from the rule, typeflow follows the rule") {
  // Each entry is another optimizer's result on one of the fixture's
  // configurations: torch.optim's Adam, SGD and RMSprop, clip_grad_norm_, and
  // Keras's code taken literally in float32. "observable" ones must lie beyond
  // the tolerance from typeflow (which matches the rule, checked again here);
  // the others, within it.
  const json& differences = reference().at("differences");
  REQUIRE(differences.size() == 6);
  std::map<std::string, const json*> configs;
  for (const json& config : reference().at("configurations")) configs[config.at("name")] = &config;
  for (const json& entry : differences) {
    const std::string label = entry.at("label");
    INFO(label << " vs " << entry.at("configuration").get<std::string>() << ": "
               << entry.at("difference").get<std::string>());
    const json& config = *configs.at(entry.at("configuration"));
    const auto ours = train(config);
    check_against(ours, config.at("final"));
    double worst = 0;
    std::string where;
    for (const auto& [name, values] : entry.at("final").items()) {
      const auto c = compare(ours.at(name), values, name);
      if (c.worst >= worst) {
        worst = c.worst;
        where = c.where;
      }
    }
    if (entry.at("observable").get<bool>())
      CHECK_MESSAGE(worst > 1.0, where);
    else
      CHECK_MESSAGE(worst <= 1.0, where);
    if (std::getenv("TYPEFLOW_REFERENCE_REPORT"))
      std::printf("typeflow vs %-36s %.3g x the allowance (%s)\n", label.c_str(), worst, where.c_str());
  }
}

// --- argument checks ------------------------------------------------------------

TEST_CASE("compile refuses two kinds of clipping, naming them") {
  tf::model<net> model;
  const tf::losses::sparse_categorical_crossentropy loss{.from_logits = true};
  CHECK_THROWS_WITH_AS(
      model.compile(opt::adam{.clipnorm = 1.f, .global_clipnorm = 1.f}, loss),
      doctest::Contains("adam: set at most one of clipnorm, clipvalue and global_clipnorm (clipnorm and "
                        "global_clipnorm are set)"),
      std::invalid_argument);
  // The message names exactly the options that are set.
  auto both = [&](auto optimizer, const char* first, const char* second) {
    try {
      model.compile(optimizer, loss);
      FAIL("compile accepted " << first << " and " << second << " together");
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      CHECK(message.find(first) != std::string::npos);
      CHECK(message.find(second) != std::string::npos);
      CHECK(message.find("at most one") != std::string::npos);
    }
  };
  both(opt::sgd{.clipnorm = 1.f, .clipvalue = 1.f}, "clipnorm", "clipvalue");
  both(opt::rmsprop{.clipvalue = 1.f, .global_clipnorm = 1.f}, "clipvalue", "global_clipnorm");
  both(opt::lion{.clipnorm = 1.f, .global_clipnorm = 1.f}, "clipnorm", "global_clipnorm");
  CHECK_THROWS_WITH_AS(model.compile(opt::adamw{.clipnorm = 1.f, .clipvalue = 1.f, .global_clipnorm = 1.f}, loss),
                       doctest::Contains("(clipnorm and clipvalue and global_clipnorm are set)"),
                       std::invalid_argument);
  // A refused compile leaves the model uncompiled.
  CHECK_THROWS_WITH_AS(model.train_on_batch(batch_type{.valid = batch_size}), doctest::Contains("call compile"),
                       std::logic_error);
  // A non-positive threshold is refused by name as well.
  CHECK_THROWS_WITH_AS(model.compile(opt::sgd{.clipnorm = 0.f}, loss), doctest::Contains("clipnorm must be positive"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(model.compile(opt::adam{.global_clipnorm = -1.f}, loss),
                       doctest::Contains("global_clipnorm must be positive"), std::invalid_argument);
}

TEST_CASE("a negative learning rate and a momentum of 1 or more are refused by name") {
  // The learning rate is checked where it is built, before compile sees it.
  CHECK_THROWS_WITH_AS(opt::sgd{.learning_rate = -0.1}, doctest::Contains("learning rate must not be negative"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(opt::adam{.learning_rate = -1e-3f}, doctest::Contains("learning_rate"), std::invalid_argument);
  CHECK_THROWS_WITH_AS((opt::adam{.learning_rate = tf::schedules::exponential_decay{-1e-3, 10, 0.5}}),
                       doctest::Contains("exponential_decay: initial_learning_rate must not be negative"),
                       std::invalid_argument);

  tf::model<net> model;
  const tf::losses::sparse_categorical_crossentropy loss{.from_logits = true};
  CHECK_THROWS_WITH_AS(model.compile(opt::sgd{.momentum = 1.f}, loss),
                       doctest::Contains("sgd: momentum must lie in [0, 1)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(model.compile(opt::sgd{.momentum = -0.5f}, loss),
                       doctest::Contains("sgd: momentum must lie in [0, 1)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(model.compile(opt::rmsprop{.momentum = 1.f}, loss),
                       doctest::Contains("rmsprop: momentum must lie in [0, 1)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(model.compile(opt::adam{.beta_1 = 1.f}, loss),
                       doctest::Contains("adam: beta_1 must lie in [0, 1)"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(model.compile(opt::adamw{.weight_decay = -0.1f}, loss),
                       doctest::Contains("adamw: weight_decay must not be negative"), std::invalid_argument);
  // The edges that are allowed.
  CHECK_NOTHROW(model.compile(opt::sgd{.learning_rate = 0.0, .momentum = 0.f}, loss));
  CHECK_NOTHROW(model.compile(opt::sgd{.momentum = 0.99f}, loss));
}

// --- the default scope of decoupled weight decay ----------------------------------
// With zero gradients and zero state every rule leaves a weight alone, so what
// moves is the decay: w *= 1 - lr * weight_decay, where the scope allows.

TEST_CASE("adamw and lion decay kernels but not biases by default, decay_scope::all decays both") {
  const float lr = 0.5f, wd = 0.1f;  // factor 0.95
  SUBCASE("adamw, default scope") {
    two_tensors t;
    opt::adamw o{.learning_rate = lr, .weight_decay = wd};
    CHECK(o.weight_decay_applies_to == opt::decay_scope::kernels);
    t.step(o);
    CHECK(t.weights == std::vector<float>{0.95f, -1.9f, 1.f, -2.f});
  }
  SUBCASE("adamw, decay_scope::all") {
    two_tensors t;
    t.step(opt::adamw{.learning_rate = lr, .weight_decay = wd, .weight_decay_applies_to = opt::decay_scope::all});
    CHECK(t.weights == std::vector<float>{0.95f, -1.9f, 0.95f, -1.9f});
  }
  SUBCASE("lion, default scope") {
    two_tensors t;
    opt::lion o{.learning_rate = lr, .weight_decay = wd};
    CHECK(o.weight_decay_applies_to == opt::decay_scope::kernels);
    t.step(o);
    CHECK(t.weights == std::vector<float>{0.95f, -1.9f, 1.f, -2.f});
  }
  SUBCASE("lion, decay_scope::all") {
    two_tensors t;
    t.step(opt::lion{.learning_rate = lr, .weight_decay = wd, .weight_decay_applies_to = opt::decay_scope::all});
    CHECK(t.weights == std::vector<float>{0.95f, -1.9f, 0.95f, -1.9f});
  }
  SUBCASE("adam's and sgd's weight_decay reach biases too, as plain Keras") {
    two_tensors t;
    opt::adam o{.learning_rate = lr, .weight_decay = wd};
    CHECK(o.weight_decay_applies_to == opt::decay_scope::all);
    t.step(o);
    CHECK(t.weights == std::vector<float>{0.95f, -1.9f, 0.95f, -1.9f});
    two_tensors s;
    s.step(opt::sgd{.learning_rate = lr, .weight_decay = wd});
    CHECK(s.weights == std::vector<float>{0.95f, -1.9f, 0.95f, -1.9f});
  }
  SUBCASE("the decay uses the schedule's rate of this step") {
    // cosine_decay from 0.5 over 2 steps: rates 0.5, 0.25; the second update decays by 1 - 0.25 * 0.1.
    two_tensors t;
    const opt::adamw o{.learning_rate = tf::schedules::cosine_decay{0.5, 2}, .weight_decay = wd};
    t.step(o, 1);
    t.step(o, 2);
    CHECK(t.weights[0] == doctest::Approx(0.95 * 0.975).epsilon(1e-6));
    CHECK(t.weights[2] == 1.f);
  }
  SUBCASE("embeddings decay by default; statistics never do") {
    two_tensors t;
    t.tensors[0].kind = tf::param_kind::embedding;
    t.tensors[1].kind = tf::param_kind::statistic;
    t.step(opt::adamw{.learning_rate = lr, .weight_decay = wd, .weight_decay_applies_to = opt::decay_scope::all});
    CHECK(t.weights == std::vector<float>{0.95f, -1.9f, 1.f, -2.f});
    two_tensors u;
    u.tensors[0].kind = tf::param_kind::embedding;
    u.step(opt::lion{.learning_rate = lr, .weight_decay = wd});
    CHECK(u.weights == std::vector<float>{0.95f, -1.9f, 1.f, -2.f});
  }
}

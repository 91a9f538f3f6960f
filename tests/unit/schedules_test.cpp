// Learning-rate schedules: Keras's values (from tests/reference/schedules.json,
// written by tests/reference/schedules_reference.py), the argument checks and
// their messages, and the type-erased learning_rate.
#include "typeflow/schedules/schedules.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/reference_json.hpp"

namespace sch = typeflow::schedules;
using json = nlohmann::json;

namespace {

const json& reference() {
  static const json document = typeflow::testing::read_reference("schedules.json");
  return document;
}

// |actual - expected| <= 1e-6 * |expected|; an expected 0 must come out as 0
// to the last bit of a learning rate's scale.
bool close(double actual, double expected) {
  return std::fabs(actual - expected) <= 1e-6 * std::fabs(expected) + 1e-15;
}

// Builds the schedule a JSON case describes and hands it, as its own type, to f.
template <class F>
void with_basic_schedule(const json& spec, F&& f) {
  const std::string kind = spec.at("schedule");
  const json& a = spec.at("args");
  if (kind == "constant") {
    f(sch::constant{a.at("learning_rate").get<double>()});
  } else if (kind == "exponential_decay") {
    f(sch::exponential_decay{a.at("initial_learning_rate").get<double>(), a.at("decay_steps").get<std::int64_t>(),
                             a.at("decay_rate").get<double>(), a.at("staircase").get<bool>()});
  } else if (kind == "piecewise_constant") {
    const auto boundaries = a.at("boundaries").get<std::vector<std::int64_t>>();
    const auto values = a.at("values").get<std::vector<double>>();
    f(sch::piecewise_constant{boundaries, values});
  } else if (kind == "inverse_sqrt") {
    f(sch::inverse_sqrt{a.at("learning_rate").get<double>(), a.at("warmup_steps").get<std::int64_t>()});
  } else if (kind == "cosine_decay") {
    sch::cosine_decay::options options{.alpha = a.at("alpha").get<double>()};
    if (a.contains("warmup_target")) options.warmup_target = a.at("warmup_target").get<double>();
    if (a.contains("warmup_steps")) options.warmup_steps = a.at("warmup_steps").get<std::int64_t>();
    f(sch::cosine_decay{a.at("initial_learning_rate").get<double>(), a.at("decay_steps").get<std::int64_t>(),
                        options});
  } else if (kind == "cosine_decay_restarts") {
    f(sch::cosine_decay_restarts{a.at("initial_learning_rate").get<double>(),
                                 a.at("first_decay_steps").get<std::int64_t>(),
                                 {.t_mul = a.at("t_mul").get<double>(),
                                  .m_mul = a.at("m_mul").get<double>(),
                                  .alpha = a.at("alpha").get<double>()}});
  } else {
    FAIL("unknown schedule in schedules.json: " << kind);
  }
}

template <class F>
void with_schedule(const json& spec, F&& f) {
  if (spec.at("schedule") == "linear_warmup") {
    const json& a = spec.at("args");
    with_basic_schedule(spec.at("inner"), [&](auto inner) {
      f(sch::warmup(inner, a.at("warmup_steps").get<std::int64_t>(), a.at("start").get<double>()));
    });
  } else {
    with_basic_schedule(spec, f);
  }
}

// Checks one reference case against the schedule itself and through learning_rate.
void check_case(const json& c) {
  const std::string case_name = c.at("name");
  INFO("case: " << case_name);
  const auto steps = c.at("steps").get<std::vector<std::int64_t>>();
  const auto expected = c.at("expected").get<std::vector<double>>();
  REQUIRE(steps.size() == expected.size());
  with_schedule(c, [&](auto schedule) {
    static_assert(sch::schedule<decltype(schedule)>);
    const sch::learning_rate erased = schedule;
    CHECK(erased.name() == decltype(schedule)::name);
    for (std::size_t i = 0; i < steps.size(); ++i) {
      INFO("step " << steps[i] << ": expected " << expected[i]);
      CHECK_MESSAGE(close(schedule(steps[i]), expected[i]), "got " << schedule(steps[i]));
      CHECK(erased(steps[i]) == schedule(steps[i]));
    }
  });
}

// Runs every reference case of one schedule kind; returns how many there were.
int check_reference_cases(std::string_view kind) {
  int count = 0;
  for (const json& c : reference().at("cases")) {
    if (c.at("schedule").get<std::string>() != kind) continue;
    check_case(c);
    ++count;
  }
  return count;
}

}  // namespace

// ---------------------------------------------------------------------------
// Values, against the reference computed from Keras's code (and torch).

TEST_CASE("the reference file holds cases for every schedule") {
  const json& cases = reference().at("cases");
  CHECK(cases.size() >= 20);
  int values = 0;
  for (const json& c : cases) values += static_cast<int>(c.at("steps").size());
  CHECK(values >= 150);
}

TEST_CASE("constant gives its rate at every step") { CHECK(check_reference_cases("constant") == 1); }

TEST_CASE("exponential_decay matches Keras ExponentialDecay, continuous and staircase") {
  CHECK(check_reference_cases("exponential_decay") == 3);
}

TEST_CASE("piecewise_constant matches Keras PiecewiseConstantDecay at and around each boundary") {
  CHECK(check_reference_cases("piecewise_constant") == 2);
}

TEST_CASE("inverse_sqrt warms up linearly from 0 and then decays as 1/sqrt(step)") {
  CHECK(check_reference_cases("inverse_sqrt") == 1);
}

TEST_CASE("cosine_decay matches Keras CosineDecay, with and without its warmup") {
  CHECK(check_reference_cases("cosine_decay") == 6);
}

TEST_CASE("cosine_decay_restarts matches Keras CosineDecayRestarts across restarts") {
  CHECK(check_reference_cases("cosine_decay_restarts") == 5);
}

TEST_CASE("linear_warmup ramps to the schedule's first rate and then runs it late by the warmup") {
  CHECK(check_reference_cases("linear_warmup") == 4);
}

TEST_CASE("cosine_decay written as in the design document warms up for 500 steps to 1e-3") {
  const sch::cosine_decay schedule{1e-3, 5000, {.warmup_steps = 500}};
  CHECK(schedule(0) == 0.0);
  CHECK(close(schedule(250), 0.5e-3));
  CHECK(close(schedule(500), 1e-3));
  CHECK(close(schedule(500 + 2500), 0.5e-3));
  CHECK(schedule(500 + 5000) == 0.0);
}

TEST_CASE("cosine_decay_restarts restarts at the period boundaries that Keras's logarithm can miss") {
  // Periods of 10, 30, 90, 270, 810: restart 5 begins at step 1210, where
  // log(243) / log(3) rounds to just under 5 in double.
  const sch::cosine_decay_restarts schedule{0.1, 10, {.t_mul = 3.0}};
  for (std::int64_t restart : {10, 40, 130, 400, 1210, 3640}) {
    INFO("restart at step " << restart);
    CHECK(close(schedule(restart), 0.1));
    CHECK(schedule(restart - 1) < 0.1 / 10);  // the end of the period before
  }
}

// ---------------------------------------------------------------------------
// Compile-time facts.

TEST_CASE("schedules are literal types built and read at compile time") {
  constexpr sch::cosine_decay cosine{1e-3, 5000, {.warmup_target = 2e-3, .warmup_steps = 500}};
  static_assert(cosine.decay_steps() == 5000 && cosine.warmup_steps() == 500 && *cosine.warmup_target() == 2e-3);

  constexpr sch::piecewise_constant piecewise{{100, 200}, {1.0, 0.5, 0.1}};
  static_assert(piecewise(0) == 1.0 && piecewise(100) == 1.0 && piecewise(101) == 0.5);
  static_assert(piecewise(200) == 0.5 && piecewise(201) == 0.1);
  static_assert(piecewise.boundaries().size() == 2 && piecewise.values().size() == 3);

  constexpr auto warm = sch::warmup(sch::constant{0.4}, 4);
  static_assert(warm(0) == 0.0 && warm(2) == 0.2 && warm(4) == 0.4 && warm(100) == 0.4);

  constexpr sch::exponential_decay exponential{0.1, 1000, 0.96, true};
  static_assert(exponential.staircase() && exponential.decay_rate() == 0.96);
  constexpr sch::cosine_decay_restarts restarts{0.1, 100};
  static_assert(restarts.t_mul() == 2.0 && restarts.m_mul() == 1.0 && restarts.alpha() == 0.0);
  constexpr sch::inverse_sqrt inverse{1e-3, 4000};
  static_assert(inverse.warmup_steps() == 4000);

  static_assert(sch::schedule<sch::constant> && sch::schedule<sch::exponential_decay> &&
                sch::schedule<sch::piecewise_constant> && sch::schedule<sch::inverse_sqrt> &&
                sch::schedule<sch::cosine_decay> && sch::schedule<sch::cosine_decay_restarts> &&
                sch::schedule<sch::linear_warmup<sch::cosine_decay>>);
  static_assert(!sch::schedule<double> && !sch::schedule<sch::learning_rate>);
  CHECK(cosine.initial_learning_rate() == 1e-3);
}

// ---------------------------------------------------------------------------
// Argument checks: each message names the schedule and the parameter.

TEST_CASE("constant and learning_rate refuse a negative or non-finite rate") {
  CHECK_THROWS_WITH_AS(sch::constant{-0.1}, "constant: learning_rate must not be negative (got -0.1)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::learning_rate{-0.1},
                       "learning_rate: a constant learning rate must not be negative (got -0.1)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::learning_rate{std::numeric_limits<double>::quiet_NaN()},
                       "learning_rate: a constant learning rate must be finite (got nan)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::learning_rate{-1e-3f}, doctest::Contains("must not be negative"), std::invalid_argument);
  CHECK_NOTHROW(sch::learning_rate{0.0});
}

TEST_CASE("exponential_decay refuses a negative rate, a non-positive decay_steps or decay_rate") {
  CHECK_THROWS_WITH_AS(sch::exponential_decay(-0.1, 1000, 0.96),
                       "exponential_decay: initial_learning_rate must not be negative (got -0.1)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::exponential_decay(0.1, 0, 0.96), "exponential_decay: decay_steps must be positive (got 0)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::exponential_decay(0.1, 1000, -0.5),
                       "exponential_decay: decay_rate must be finite and positive (got -0.5)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::exponential_decay(0.1, 1000, std::numeric_limits<double>::infinity()),
                       "exponential_decay: decay_rate must be finite and positive (got inf)", std::invalid_argument);
}

TEST_CASE("piecewise_constant refuses mismatched, unordered, too many or no boundaries, and negative values") {
  CHECK_THROWS_WITH_AS(sch::piecewise_constant({100, 200}, {1.0, 0.5}),
                       "piecewise_constant: values must hold one more element than boundaries (got 2 boundaries and "
                       "2 values)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::piecewise_constant({100, 100}, {1.0, 0.5, 0.1}),
                       "piecewise_constant: boundaries must increase strictly (boundaries[1] = 100 follows "
                       "boundaries[0] = 100)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::piecewise_constant({}, {1.0}),
                       "piecewise_constant: boundaries must hold at least one step (for a single value, use constant)",
                       std::invalid_argument);
  std::vector<std::int64_t> boundaries(17);
  for (std::size_t i = 0; i < boundaries.size(); ++i) boundaries[i] = static_cast<std::int64_t>(i);
  const std::vector<double> values(18, 0.1);
  CHECK_THROWS_WITH_AS(sch::piecewise_constant(boundaries, values),
                       "piecewise_constant: boundaries holds 17 steps, more than the 16 a piecewise_constant can hold",
                       std::invalid_argument);
  boundaries.pop_back();
  CHECK_NOTHROW(sch::piecewise_constant(boundaries, std::vector<double>(17, 0.1)));
  CHECK_THROWS_WITH_AS(sch::piecewise_constant({10}, {0.1, -0.2}),
                       "piecewise_constant: values must not be negative (got -0.2)", std::invalid_argument);
}

TEST_CASE("inverse_sqrt refuses a negative rate and a warmup of no steps") {
  CHECK_THROWS_WITH_AS(sch::inverse_sqrt(-1.0, 10), "inverse_sqrt: learning_rate must not be negative (got -1)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::inverse_sqrt(1e-3, 0), "inverse_sqrt: warmup_steps must be positive (got 0)",
                       std::invalid_argument);
}

TEST_CASE("cosine_decay refuses a warmup longer than the decay and out-of-range arguments") {
  CHECK_THROWS_WITH_AS(sch::cosine_decay(1e-3, 5000, {.warmup_steps = 6000}),
                       "cosine_decay: warmup_steps (6000) must not exceed decay_steps (5000)", std::invalid_argument);
  CHECK_NOTHROW(sch::cosine_decay(1e-3, 5000, {.warmup_steps = 5000}));
  CHECK_THROWS_WITH_AS(sch::cosine_decay(-1e-3, 5000),
                       "cosine_decay: initial_learning_rate must not be negative (got -0.001)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::cosine_decay(1e-3, 0), "cosine_decay: decay_steps must be positive (got 0)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::cosine_decay(1e-3, 5000, {.warmup_steps = -1}),
                       "cosine_decay: warmup_steps must not be negative (got -1)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::cosine_decay(1e-3, 5000, {.warmup_target = -1.0, .warmup_steps = 10}),
                       "cosine_decay: warmup_target must not be negative (got -1)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::cosine_decay(1e-3, 5000, {.alpha = 1.5}),
                       "cosine_decay: alpha, the final fraction of the learning rate, must lie in [0, 1] (got 1.5)",
                       std::invalid_argument);
}

TEST_CASE("cosine_decay_restarts refuses shrinking periods, a negative m_mul and out-of-range arguments") {
  CHECK_THROWS_WITH_AS(sch::cosine_decay_restarts(0.1, 0),
                       "cosine_decay_restarts: first_decay_steps must be positive (got 0)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::cosine_decay_restarts(0.1, 100, {.t_mul = 0.5}),
                       doctest::Contains("cosine_decay_restarts: t_mul, the growth of each period, must be finite and "
                                         "at least 1 (got 0.5)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::cosine_decay_restarts(0.1, 100, {.m_mul = -1.0}),
                       "cosine_decay_restarts: m_mul must be finite and not negative (got -1)", std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::cosine_decay_restarts(0.1, 100, {.alpha = -0.1}),
                       doctest::Contains("cosine_decay_restarts: alpha"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::cosine_decay_restarts(-0.1, 100),
                       "cosine_decay_restarts: initial_learning_rate must not be negative (got -0.1)",
                       std::invalid_argument);
}

TEST_CASE("linear_warmup refuses a negative warmup or start") {
  CHECK_THROWS_WITH_AS(sch::warmup(sch::constant{0.1}, -5), "linear_warmup: warmup_steps must not be negative (got -5)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(sch::warmup(sch::constant{0.1}, 5, -0.01),
                       "linear_warmup: start must not be negative (got -0.01)", std::invalid_argument);
}

// ---------------------------------------------------------------------------
// learning_rate, the value optimizers hold.

namespace {
struct holds_a_learning_rate {  // the shape of an optimizer's fields
  sch::learning_rate learning_rate = 0.001;
  float momentum = 0.f;
};
}  // namespace

TEST_CASE("learning_rate is built implicitly from a float, a double or any schedule") {
  holds_a_learning_rate by_default;
  CHECK(by_default.learning_rate.is_constant());
  CHECK(by_default.learning_rate.name() == "constant");
  CHECK(by_default.learning_rate(0) == 0.001);

  const holds_a_learning_rate from_float{.learning_rate = 1e-3f};
  CHECK(from_float.learning_rate(12345) == static_cast<double>(1e-3f));

  const holds_a_learning_rate from_schedule{.learning_rate = sch::cosine_decay{1e-3, 5000, {.warmup_steps = 500}}};
  CHECK_FALSE(from_schedule.learning_rate.is_constant());
  CHECK(from_schedule.learning_rate.name() == "cosine_decay");
  CHECK(close(from_schedule.learning_rate(500), 1e-3));

  const sch::learning_rate warm = sch::warmup(sch::exponential_decay{0.1, 100, 0.5}, 10);
  CHECK(warm.name() == "linear_warmup");
  CHECK(close(warm(5), 0.05));
  CHECK(close(warm(110), 0.05));
}

TEST_CASE("learning_rate gives each schedule's own values and hands it back by type") {
  const sch::piecewise_constant piecewise{{10, 20}, {0.3, 0.2, 0.1}};
  const sch::learning_rate erased = piecewise;
  for (std::int64_t step : {0, 10, 11, 20, 21, 1000}) CHECK(erased(step) == piecewise(step));
  REQUIRE(erased.target<sch::piecewise_constant>() != nullptr);
  CHECK(erased.target<sch::piecewise_constant>()->values()[2] == 0.1);
  CHECK(erased.target<sch::cosine_decay>() == nullptr);
  CHECK(erased.target<sch::constant>() == nullptr);

  const sch::learning_rate copy = erased;  // copies share the schedule
  CHECK(copy.target<sch::piecewise_constant>() == erased.target<sch::piecewise_constant>());

  const sch::learning_rate wrapped_constant = sch::constant{0.25};
  CHECK(wrapped_constant.is_constant());
  REQUIRE(wrapped_constant.target<sch::constant>() != nullptr);
  CHECK(wrapped_constant.target<sch::constant>()->learning_rate() == 0.25);
}

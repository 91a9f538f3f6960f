// Learning-rate schedules with Keras 3's definitions (keras.optimizers.schedules).
//
// A schedule maps `step`, the number of optimizer updates already applied, to
// the learning rate of the next update: the first update asks for step 0, as
// Keras passes `optimizer.iterations` before incrementing it. Arithmetic is in
// double; Keras computes in the dtype of initial_learning_rate (float32 unless
// you pass a float64), so the two agree to float32 rounding.
//
// Each schedule is a small literal type whose constexpr constructor checks its
// arguments. A bad argument throws std::invalid_argument naming the schedule
// and the parameter:
//   cosine_decay: warmup_steps (6000) must not exceed decay_steps (5000)
// and in a constexpr declaration the same check is a compile error that names
// the broken rule:
//   constexpr tf::schedules::cosine_decay lr{1e-3, 5000, {.warmup_steps = 6000}};
//   error: call to non-'constexpr' function '... warmup_steps_must_not_exceed_decay_steps(...)'
//
// `learning_rate` holds a constant or any schedule; optimizers store it, so
//   .learning_rate = 1e-3f
//   .learning_rate = tf::schedules::cosine_decay{1e-3, 5000, {.warmup_steps = 500}}
// both work.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <numbers>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace typeflow::schedules {

// S is a schedule when a const S maps a step to a learning rate and S says its name.
template <class S>
concept schedule = std::copy_constructible<S> && requires(const S& s, std::int64_t step) {
  { s(step) } -> std::convertible_to<double>;
  { S::name } -> std::convertible_to<std::string_view>;
};

// The rules the constructors check. Each rule that fails calls the function
// named after it; these are deliberately not constexpr, so that in constant
// evaluation the compiler stops at the call and prints the rule's name.
namespace rules {

inline std::string number(double value) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  return std::string(text, end);
}
inline std::string number(std::int64_t value) { return std::to_string(value); }

[[noreturn]] inline void refuse(const char* schedule, const std::string& what) {
  throw std::invalid_argument(std::string(schedule) + ": " + what);
}

// A learning rate (or a value that becomes one) is a finite number >= 0.
[[noreturn]] inline void learning_rate_must_be_finite_and_not_negative(const char* schedule, const char* parameter,
                                                                       double value) {
  refuse(schedule, std::string(parameter) + (std::isfinite(value) ? " must not be negative" : " must be finite") +
                       " (got " + number(value) + ")");
}
[[noreturn]] inline void steps_must_be_positive(const char* schedule, const char* parameter, std::int64_t value) {
  refuse(schedule, std::string(parameter) + " must be positive (got " + number(value) + ")");
}
[[noreturn]] inline void steps_must_not_be_negative(const char* schedule, const char* parameter, std::int64_t value) {
  refuse(schedule, std::string(parameter) + " must not be negative (got " + number(value) + ")");
}
[[noreturn]] inline void warmup_steps_must_not_exceed_decay_steps(const char* schedule, std::int64_t warmup_steps,
                                                                  std::int64_t decay_steps) {
  refuse(schedule, "warmup_steps (" + number(warmup_steps) + ") must not exceed decay_steps (" + number(decay_steps) +
                       ")");
}
[[noreturn]] inline void alpha_must_lie_in_0_1(const char* schedule, double alpha) {
  refuse(schedule, "alpha, the final fraction of the learning rate, must lie in [0, 1] (got " + number(alpha) + ")");
}
[[noreturn]] inline void decay_rate_must_be_finite_and_positive(const char* schedule, double decay_rate) {
  refuse(schedule, "decay_rate must be finite and positive (got " + number(decay_rate) + ")");
}
[[noreturn]] inline void t_mul_must_be_finite_and_at_least_1(const char* schedule, double t_mul) {
  refuse(schedule,
         "t_mul, the growth of each period, must be finite and at least 1 (got " + number(t_mul) +
             "); shrinking periods sum to a finite length, after which the schedule is undefined");
}
[[noreturn]] inline void m_mul_must_be_finite_and_not_negative(const char* schedule, double m_mul) {
  refuse(schedule, "m_mul must be finite and not negative (got " + number(m_mul) + ")");
}
[[noreturn]] inline void boundaries_must_not_be_empty(const char* schedule) {
  refuse(schedule, "boundaries must hold at least one step (for a single value, use constant)");
}
[[noreturn]] inline void boundaries_must_fit_capacity(const char* schedule, std::size_t count, std::size_t capacity) {
  refuse(schedule, "boundaries holds " + std::to_string(count) + " steps, more than the " + std::to_string(capacity) +
                       " a piecewise_constant can hold");
}
[[noreturn]] inline void values_must_hold_one_more_than_boundaries(const char* schedule, std::size_t boundaries,
                                                                   std::size_t values) {
  refuse(schedule, "values must hold one more element than boundaries (got " + std::to_string(boundaries) +
                       " boundaries and " + std::to_string(values) + " values)");
}
[[noreturn]] inline void boundaries_must_increase_strictly(const char* schedule, std::size_t i, std::int64_t previous,
                                                           std::int64_t next) {
  refuse(schedule, "boundaries must increase strictly (boundaries[" + std::to_string(i) + "] = " + number(next) +
                       " follows boundaries[" + std::to_string(i - 1) + "] = " + number(previous) + ")");
}

// The checks themselves: constexpr, and silent when the rule holds.
constexpr bool is_finite(double x) {
  return x == x && x != std::numeric_limits<double>::infinity() && x != -std::numeric_limits<double>::infinity();
}
constexpr void check_learning_rate(const char* schedule, const char* parameter, double value) {
  if (!is_finite(value) || value < 0.0) learning_rate_must_be_finite_and_not_negative(schedule, parameter, value);
}
constexpr void check_positive_steps(const char* schedule, const char* parameter, std::int64_t value) {
  if (value <= 0) steps_must_be_positive(schedule, parameter, value);
}
constexpr void check_steps_not_negative(const char* schedule, const char* parameter, std::int64_t value) {
  if (value < 0) steps_must_not_be_negative(schedule, parameter, value);
}
constexpr void check_alpha(const char* schedule, double alpha) {
  if (!(alpha >= 0.0 && alpha <= 1.0)) alpha_must_lie_in_0_1(schedule, alpha);
}

}  // namespace rules

// ---------------------------------------------------------------------------
// The same learning rate at every step.
class constant {
 public:
  static constexpr std::string_view name = "constant";

  constexpr constant(double learning_rate) : learning_rate_{learning_rate} {  // NOLINT: implicit by design
    rules::check_learning_rate("constant", "learning_rate", learning_rate);
  }

  constexpr double operator()(std::int64_t /*step*/) const { return learning_rate_; }
  constexpr double learning_rate() const { return learning_rate_; }

 private:
  double learning_rate_;
};

// ---------------------------------------------------------------------------
// Keras ExponentialDecay:
//   lr(step) = initial_learning_rate * decay_rate ^ (step / decay_steps)
// with the exponent floored (a staircase) when `staircase` is set.
// Refuses: initial_learning_rate < 0 or not finite; decay_steps <= 0 (as Keras);
// decay_rate <= 0 or not finite (a fractional power of a negative is NaN).
class exponential_decay {
 public:
  static constexpr std::string_view name = "exponential_decay";

  constexpr exponential_decay(double initial_learning_rate, std::int64_t decay_steps, double decay_rate,
                              bool staircase = false)
      : initial_learning_rate_{initial_learning_rate},
        decay_steps_{decay_steps},
        decay_rate_{decay_rate},
        staircase_{staircase} {
    rules::check_learning_rate("exponential_decay", "initial_learning_rate", initial_learning_rate);
    rules::check_positive_steps("exponential_decay", "decay_steps", decay_steps);
    if (!rules::is_finite(decay_rate) || decay_rate <= 0.0)
      rules::decay_rate_must_be_finite_and_positive("exponential_decay", decay_rate);
  }

  double operator()(std::int64_t step) const {
    double p = static_cast<double>(step) / static_cast<double>(decay_steps_);
    if (staircase_) p = std::floor(p);
    return initial_learning_rate_ * std::pow(decay_rate_, p);
  }

  constexpr double initial_learning_rate() const { return initial_learning_rate_; }
  constexpr std::int64_t decay_steps() const { return decay_steps_; }
  constexpr double decay_rate() const { return decay_rate_; }
  constexpr bool staircase() const { return staircase_; }

 private:
  double initial_learning_rate_;
  std::int64_t decay_steps_;
  double decay_rate_;
  bool staircase_;
};

// ---------------------------------------------------------------------------
// Keras PiecewiseConstantDecay: with boundaries b[0] < ... < b[n-1] and n+1 values,
//   lr(step) = values[0]   for            step <= b[0]
//              values[i]   for b[i-1] <  step <= b[i]
//              values[n]   for b[n-1] <  step
// Boundaries and values live in fixed arrays (at most `capacity` boundaries) so
// that the type stays literal and a constexpr one is checked by the compiler.
// Refuses: no boundaries, more than `capacity`, boundaries that do not increase
// strictly, a count of values other than boundaries + 1, a negative or
// non-finite value.
class piecewise_constant {
 public:
  static constexpr std::string_view name = "piecewise_constant";
  static constexpr std::size_t capacity = 16;

  constexpr piecewise_constant(std::initializer_list<std::int64_t> boundaries, std::initializer_list<double> values)
      : piecewise_constant(std::span<const std::int64_t>(boundaries.begin(), boundaries.size()),
                           std::span<const double>(values.begin(), values.size())) {}

  constexpr piecewise_constant(std::span<const std::int64_t> boundaries, std::span<const double> values) {
    if (boundaries.empty()) rules::boundaries_must_not_be_empty("piecewise_constant");
    if (boundaries.size() > capacity)
      rules::boundaries_must_fit_capacity("piecewise_constant", boundaries.size(), capacity);
    if (values.size() != boundaries.size() + 1)
      rules::values_must_hold_one_more_than_boundaries("piecewise_constant", boundaries.size(), values.size());
    for (std::size_t i = 1; i < boundaries.size(); ++i)
      if (boundaries[i] <= boundaries[i - 1])
        rules::boundaries_must_increase_strictly("piecewise_constant", i, boundaries[i - 1], boundaries[i]);
    for (double value : values) rules::check_learning_rate("piecewise_constant", "values", value);
    count_ = boundaries.size();
    std::copy(boundaries.begin(), boundaries.end(), boundaries_.begin());
    std::copy(values.begin(), values.end(), values_.begin());
  }

  constexpr double operator()(std::int64_t step) const {
    for (std::size_t i = 0; i < count_; ++i)
      if (step <= boundaries_[i]) return values_[i];
    return values_[count_];
  }

  constexpr std::span<const std::int64_t> boundaries() const { return {boundaries_.data(), count_}; }
  constexpr std::span<const double> values() const { return {values_.data(), count_ + 1}; }

 private:
  std::array<std::int64_t, capacity> boundaries_{};
  std::array<double, capacity + 1> values_{};
  std::size_t count_ = 0;
};

// ---------------------------------------------------------------------------
// Inverse square root decay after a linear warmup from 0, the schedule of
// "Attention Is All You Need" (there written with d_model^-0.5 folded into the
// rate). Keras 3 has no such class; this is typeflow's definition:
//   lr(step) = learning_rate * step / warmup_steps              step <  warmup_steps
//              learning_rate * sqrt(warmup_steps / step)        step >= warmup_steps
// that is, learning_rate * min(step / w, sqrt(w / max(step, w))). It peaks at
// learning_rate at step == warmup_steps and is continuous there; the first
// update (step 0) has rate 0, as with Keras's CosineDecay warming up from 0.
// Refuses: learning_rate < 0 or not finite; warmup_steps <= 0.
class inverse_sqrt {
 public:
  static constexpr std::string_view name = "inverse_sqrt";

  constexpr inverse_sqrt(double learning_rate, std::int64_t warmup_steps)
      : learning_rate_{learning_rate}, warmup_steps_{warmup_steps} {
    rules::check_learning_rate("inverse_sqrt", "learning_rate", learning_rate);
    rules::check_positive_steps("inverse_sqrt", "warmup_steps", warmup_steps);
  }

  double operator()(std::int64_t step) const {
    const double s = static_cast<double>(step);
    const double w = static_cast<double>(warmup_steps_);
    if (step < warmup_steps_) return learning_rate_ * s / w;
    return learning_rate_ * std::sqrt(w / s);
  }

  constexpr double learning_rate() const { return learning_rate_; }
  constexpr std::int64_t warmup_steps() const { return warmup_steps_; }

 private:
  double learning_rate_;
  std::int64_t warmup_steps_;
};

// ---------------------------------------------------------------------------
// Keras CosineDecay, warmup included. With w = warmup_steps, d = decay_steps,
// peak = warmup_target (or initial_learning_rate when it is unset), and s =
// min(step, w + d):
//   lr = (peak - initial_learning_rate) * s / w + initial_learning_rate   s < w
//   lr = peak * ((1 - alpha) * 0.5 * (1 + cos(pi * (s - w) / d)) + alpha)  otherwise
// so the cosine runs for d steps after the warmup and then holds peak * alpha.
//
// One difference from Keras, for a spelling Keras ignores: Keras skips the
// warmup whenever warmup_target is unset, even with warmup_steps > 0. Here
// warmup_steps > 0 without a warmup_target warms up from 0 to
// initial_learning_rate, i.e. it is Keras's
//   CosineDecay(0, d, alpha, warmup_target=initial_learning_rate, warmup_steps=w)
// so that cosine_decay{1e-3, 5000, {.warmup_steps = 500}} means what it says.
// Every configuration Keras acts on (warmup_target set, or warmup_steps == 0)
// gives Keras's values.
//
// Refuses: initial_learning_rate or warmup_target < 0 or not finite;
// decay_steps <= 0 (as Keras); warmup_steps < 0; warmup_steps > decay_steps
// (typeflow's rule: a warmup longer than the decay is almost surely a mix-up
// of the two step counts); alpha outside [0, 1].
struct cosine_decay_options {
  double alpha = 0.0;                        // the final rate, as a fraction of the peak
  std::optional<double> warmup_target = {};  // the rate the warmup reaches
  std::int64_t warmup_steps = 0;             // steps of linear warmup before the decay
};

class cosine_decay {
 public:
  static constexpr std::string_view name = "cosine_decay";
  using options = cosine_decay_options;

  constexpr cosine_decay(double initial_learning_rate, std::int64_t decay_steps, options opts = {})
      : initial_learning_rate_{initial_learning_rate},
        decay_steps_{decay_steps},
        alpha_{opts.alpha},
        warmup_target_{opts.warmup_target},
        warmup_steps_{opts.warmup_steps} {
    rules::check_learning_rate("cosine_decay", "initial_learning_rate", initial_learning_rate);
    rules::check_positive_steps("cosine_decay", "decay_steps", decay_steps);
    rules::check_alpha("cosine_decay", opts.alpha);
    if (opts.warmup_target) rules::check_learning_rate("cosine_decay", "warmup_target", *opts.warmup_target);
    rules::check_steps_not_negative("cosine_decay", "warmup_steps", opts.warmup_steps);
    if (opts.warmup_steps > decay_steps)
      rules::warmup_steps_must_not_exceed_decay_steps("cosine_decay", opts.warmup_steps, decay_steps);
  }

  double operator()(std::int64_t step) const {
    const double w = static_cast<double>(warmup_steps_);
    const double d = static_cast<double>(decay_steps_);
    const double s = std::min(static_cast<double>(step), w + d);
    const double peak = warmup_target_.value_or(initial_learning_rate_);
    if (s < w) {
      const double warmup_start = warmup_target_ ? initial_learning_rate_ : 0.0;
      return (peak - warmup_start) * (s / w) + warmup_start;
    }
    const double cosine_decayed = 0.5 * (1.0 + std::cos(std::numbers::pi * ((s - w) / d)));
    return peak * ((1.0 - alpha_) * cosine_decayed + alpha_);
  }

  constexpr double initial_learning_rate() const { return initial_learning_rate_; }
  constexpr std::int64_t decay_steps() const { return decay_steps_; }
  constexpr double alpha() const { return alpha_; }
  constexpr std::optional<double> warmup_target() const { return warmup_target_; }
  constexpr std::int64_t warmup_steps() const { return warmup_steps_; }

 private:
  double initial_learning_rate_;
  std::int64_t decay_steps_;
  double alpha_;
  std::optional<double> warmup_target_;
  std::int64_t warmup_steps_;
};

// ---------------------------------------------------------------------------
// Keras CosineDecayRestarts (SGDR, Loshchilov & Hutter 2016). Period i (from 0)
// lasts first_decay_steps * t_mul^i steps and starts at m_mul^i times the rate:
// with f = step / first_decay_steps,
//   i = the restart f has reached: floor(log(1 - f * (1 - t_mul)) / log(t_mul)),
//       or floor(f) when t_mul == 1
//   c = the fraction of period i done: (f - (1 - t_mul^i) / (1 - t_mul)) / t_mul^i,
//       or f - i when t_mul == 1
//   lr = initial_learning_rate * ((1 - alpha) * 0.5 * m_mul^i * (1 + cos(pi * c)) + alpha)
// Note that alpha is a fraction of initial_learning_rate, not scaled by m_mul^i.
// Keras takes i straight from the floored logarithm, which rounding can put one
// period early exactly at a restart (t_mul = 3: f = 121, the start of period 5,
// gives i = 4, c = 1 and the rate's minimum instead of its restart); here i is
// then corrected to the period that f lies in.
// Refuses: initial_learning_rate < 0 or not finite; first_decay_steps <= 0 (as
// Keras); t_mul < 1 or not finite; m_mul < 0 or not finite; alpha outside [0, 1].
struct cosine_decay_restarts_options {
  double t_mul = 2.0;  // each period is t_mul times longer than the last
  double m_mul = 1.0;  // each period starts at m_mul times the last one's rate
  double alpha = 0.0;  // the lowest rate, as a fraction of initial_learning_rate
};

class cosine_decay_restarts {
 public:
  static constexpr std::string_view name = "cosine_decay_restarts";
  using options = cosine_decay_restarts_options;

  constexpr cosine_decay_restarts(double initial_learning_rate, std::int64_t first_decay_steps, options opts = {})
      : initial_learning_rate_{initial_learning_rate},
        first_decay_steps_{first_decay_steps},
        t_mul_{opts.t_mul},
        m_mul_{opts.m_mul},
        alpha_{opts.alpha} {
    rules::check_learning_rate("cosine_decay_restarts", "initial_learning_rate", initial_learning_rate);
    rules::check_positive_steps("cosine_decay_restarts", "first_decay_steps", first_decay_steps);
    if (!rules::is_finite(opts.t_mul) || opts.t_mul < 1.0)
      rules::t_mul_must_be_finite_and_at_least_1("cosine_decay_restarts", opts.t_mul);
    if (!rules::is_finite(opts.m_mul) || opts.m_mul < 0.0)
      rules::m_mul_must_be_finite_and_not_negative("cosine_decay_restarts", opts.m_mul);
    rules::check_alpha("cosine_decay_restarts", opts.alpha);
  }

  double operator()(std::int64_t step) const {
    const double f = static_cast<double>(step) / static_cast<double>(first_decay_steps_);
    double i_restart;
    double completed_fraction;
    if (t_mul_ == 1.0) {
      i_restart = std::floor(f);
      completed_fraction = f - i_restart;
    } else {
      // Steps before period i: first_decay_steps * (1 - t_mul^i) / (1 - t_mul).
      const auto periods_before = [&](double i) { return (1.0 - std::pow(t_mul_, i)) / (1.0 - t_mul_); };
      i_restart = std::floor(std::log(1.0 - f * (1.0 - t_mul_)) / std::log(t_mul_));
      if (periods_before(i_restart + 1.0) <= f)
        i_restart += 1.0;
      else if (i_restart > 0.0 && periods_before(i_restart) > f)
        i_restart -= 1.0;
      completed_fraction = (f - periods_before(i_restart)) / std::pow(t_mul_, i_restart);
    }
    const double m_fac = std::pow(m_mul_, i_restart);
    const double cosine_decayed = 0.5 * m_fac * (1.0 + std::cos(std::numbers::pi * completed_fraction));
    return initial_learning_rate_ * ((1.0 - alpha_) * cosine_decayed + alpha_);
  }

  constexpr double initial_learning_rate() const { return initial_learning_rate_; }
  constexpr std::int64_t first_decay_steps() const { return first_decay_steps_; }
  constexpr double t_mul() const { return t_mul_; }
  constexpr double m_mul() const { return m_mul_; }
  constexpr double alpha() const { return alpha_; }

 private:
  double initial_learning_rate_;
  std::int64_t first_decay_steps_;
  double t_mul_, m_mul_, alpha_;
};

// ---------------------------------------------------------------------------
// A linear warmup in front of any schedule (typeflow's; Keras has it only
// inside CosineDecay). With w = warmup_steps:
//   lr(step) = start + (schedule(0) - start) * step / w    step <  w
//              schedule(step - w)                          step >= w
// so the wrapped schedule starts, at its own step 0, where the warmup ends,
// and runs w steps late. warmup_steps == 0 is the schedule itself.
// Refuses: warmup_steps < 0; start < 0 or not finite.
template <schedule Schedule>
class linear_warmup {
 public:
  static constexpr std::string_view name = "linear_warmup";

  constexpr linear_warmup(Schedule schedule, std::int64_t warmup_steps, double start = 0.0)
      : schedule_{std::move(schedule)}, warmup_steps_{warmup_steps}, start_{start} {
    rules::check_steps_not_negative("linear_warmup", "warmup_steps", warmup_steps);
    rules::check_learning_rate("linear_warmup", "start", start);
  }

  constexpr double operator()(std::int64_t step) const {
    if (step < warmup_steps_) {
      const double peak = schedule_(0);
      return start_ + (peak - start_) * (static_cast<double>(step) / static_cast<double>(warmup_steps_));
    }
    return schedule_(step - warmup_steps_);
  }

  constexpr const Schedule& schedule() const { return schedule_; }
  constexpr std::int64_t warmup_steps() const { return warmup_steps_; }
  constexpr double start() const { return start_; }

 private:
  Schedule schedule_;
  std::int64_t warmup_steps_;
  double start_;
};

// warmup(cosine_decay{1e-3, 5000}, 500): linear_warmup with its arguments deduced.
template <schedule Schedule>
constexpr linear_warmup<Schedule> warmup(Schedule schedule, std::int64_t warmup_steps, double start = 0.0) {
  return linear_warmup<Schedule>(std::move(schedule), warmup_steps, start);
}

// ---------------------------------------------------------------------------
// The learning rate an optimizer holds: a constant, or any schedule behind one
// indirect call. Built implicitly from a number or a schedule:
//   learning_rate lr = 1e-3f;                           // constant, no allocation
//   learning_rate lr = cosine_decay{1e-3, 5000};        // allocates once, here
// Copies share the (immutable) schedule. Calling it never allocates.
// Refuses: a negative or non-finite constant.
class learning_rate {
 public:
  learning_rate(double constant_rate) : constant_{checked(constant_rate)} {}  // NOLINT: implicit by design

  // (learning_rate itself is excluded first, so that checking whether it is
  // copyable does not ask whether it is a schedule, which asks the former.)
  template <class Schedule>
    requires(!std::same_as<std::remove_cvref_t<Schedule>, learning_rate> && schedule<Schedule>)
  learning_rate(Schedule schedule)  // NOLINT: implicit by design
      : constant_{0.0} {
    if constexpr (std::same_as<Schedule, constant>) {
      constant_ = schedule;
    } else {
      schedule_ = std::make_shared<const Schedule>(std::move(schedule));
      evaluate_ = [](const void* s, std::int64_t step) -> double {
        return (*static_cast<const Schedule*>(s))(step);
      };
      name_ = Schedule::name;
      type_ = &type_tag<Schedule>;
    }
  }

  double operator()(std::int64_t step) const {
    return evaluate_ ? evaluate_(schedule_.get(), step) : constant_.learning_rate();
  }

  // The schedule's name: "constant", "cosine_decay", ...
  std::string_view name() const { return evaluate_ ? name_ : constant::name; }

  bool is_constant() const noexcept { return evaluate_ == nullptr; }

  // The schedule held, when it is a Schedule; nullptr otherwise.
  template <schedule Schedule>
  const Schedule* target() const noexcept {
    if constexpr (std::same_as<Schedule, constant>) {
      return is_constant() ? &constant_ : nullptr;
    } else {
      return type_ == &type_tag<Schedule> ? static_cast<const Schedule*>(schedule_.get()) : nullptr;
    }
  }

 private:
  template <class>
  static constexpr char type_tag = 0;

  static constant checked(double rate) {
    if (!rules::is_finite(rate) || rate < 0.0)
      rules::learning_rate_must_be_finite_and_not_negative("learning_rate", "a constant learning rate", rate);
    return constant{rate};
  }

  constant constant_;
  std::shared_ptr<const void> schedule_;
  double (*evaluate_)(const void*, std::int64_t) = nullptr;
  std::string_view name_;
  const void* type_ = nullptr;
};

}  // namespace typeflow::schedules

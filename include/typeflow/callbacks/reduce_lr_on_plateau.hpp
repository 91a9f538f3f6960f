// callbacks::reduce_lr_on_plateau: Keras's ReduceLROnPlateau, with its arguments.
//
//   tf::callbacks::reduce_lr_on_plateau plateau({.monitor = "val_loss", .factor = 0.5, .patience = 2});
//   model.fit(train, {.epochs = 50, .validation_data = test, .callbacks = {&plateau}});
//
// After each epoch: a monitored value that improves on the best by more than
// min_delta is the new best and resets the wait; otherwise, outside a
// cooldown, the wait grows, and once it reaches patience the learning rate
// becomes max(rate * factor, min_lr) (when it is above min_lr), the wait
// starts again and a cooldown of `cooldown` epochs begins, during which the
// wait stays 0. The optimizer must have a constant learning rate (Keras
// refuses a schedule too); a checkpoint keeps the reduced rate and this
// callback's wait, cooldown and best.
#pragma once

#include <algorithm>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>

#include "typeflow/callbacks/monitor.hpp"
#include "typeflow/callbacks/callback.hpp"

namespace typeflow::callbacks {

struct reduce_lr_on_plateau_options {
  std::string monitor = "val_loss";
  double factor = 0.1;
  int patience = 10;
  int verbose = 0;
  std::string_view mode = "auto";
  double min_delta = 1e-4;
  int cooldown = 0;
  double min_lr = 0.0;
};

class reduce_lr_on_plateau : public callback {
 public:
  explicit reduce_lr_on_plateau(reduce_lr_on_plateau_options options = {})
      : options_(std::move(options)),
        value_(options_.monitor, options_.mode, options_.min_delta, "reduce_lr_on_plateau") {
    if (!(options_.factor < 1.0) || !(options_.factor >= 0.0))
      throw std::invalid_argument("reduce_lr_on_plateau: factor must lie in [0, 1), as Keras's ReduceLROnPlateau "
                                  "does not support a factor >= 1.0 (got " + std::to_string(options_.factor) + ")");
    if (options_.patience < 0 || options_.cooldown < 0)
      throw std::invalid_argument("reduce_lr_on_plateau: patience and cooldown must be at least 0");
    if (!(options_.min_lr >= 0.0)) throw std::invalid_argument("reduce_lr_on_plateau: min_lr must be at least 0");
  }

  int wait() const noexcept { return wait_; }
  int cooldown_counter() const noexcept { return cooldown_counter_; }
  std::optional<double> best() const noexcept { return best_; }

  void on_train_begin() override {
    wait_ = 0;
    cooldown_counter_ = 0;
    best_.reset();
  }

  void on_epoch_end(const epoch_info& info, const logs& l) override {
    const std::optional<double> current = value_.read(l);
    if (!current || !model()) return;
    if (in_cooldown()) {
      --cooldown_counter_;
      wait_ = 0;
    }
    if (value_.improves(*current, best_)) {
      best_ = *current;
      wait_ = 0;
    } else if (!in_cooldown()) {
      if (++wait_ >= options_.patience) {
        const double old_rate = model()->learning_rate();
        if (old_rate > static_cast<double>(static_cast<float>(options_.min_lr))) {
          const double new_rate = std::max(old_rate * options_.factor, options_.min_lr);
          model()->set_learning_rate(new_rate);
          if (options_.verbose > 0)
            std::printf("\nEpoch %d: ReduceLROnPlateau reducing learning rate to %g.\n", info.epoch + 1, new_rate);
          cooldown_counter_ = options_.cooldown;
          wait_ = 0;
        }
      }
    }
  }

  std::string_view state_name() const override { return "reduce_lr_on_plateau"; }
  void save_state(callback_state& s) const override {
    s.numbers["wait"] = wait_;
    s.numbers["cooldown_counter"] = cooldown_counter_;
    if (best_) s.numbers["best"] = *best_;
  }
  void load_state(const callback_state& s) override {
    wait_ = static_cast<int>(s.number("wait").value_or(0));
    cooldown_counter_ = static_cast<int>(s.number("cooldown_counter").value_or(0));
    best_ = s.number("best");
  }

 private:
  bool in_cooldown() const { return cooldown_counter_ > 0; }

  reduce_lr_on_plateau_options options_;
  monitored_value value_;
  int wait_ = 0;
  int cooldown_counter_ = 0;
  std::optional<double> best_;
};

}  // namespace typeflow::callbacks

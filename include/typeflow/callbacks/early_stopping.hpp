// callbacks::early_stopping: Keras's EarlyStopping, with its arguments.
//
//   tf::callbacks::early_stopping stop({.monitor = "val_loss", .patience = 3, .restore_best_weights = true});
//   model.fit(train, {.epochs = 100, .validation_data = test, .callbacks = {&stop}});
//
// After each epoch from start_from_epoch on: an epoch whose monitored value
// improves on the best so far (by more than min_delta) is the new best, and
// resets the wait unless a baseline is given and not beaten; otherwise the
// wait grows, and once it reaches patience (not in the first epoch) training
// stops. With restore_best_weights, the weights of the best epoch (or of the
// first monitored one, if none improved) are put back when training ends.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "typeflow/callbacks/monitor.hpp"
#include "typeflow/callbacks/callback.hpp"

namespace typeflow::callbacks {

struct early_stopping_options {
  std::string monitor = "val_loss";
  double min_delta = 0;
  int patience = 0;
  int verbose = 0;
  std::string_view mode = "auto";
  std::optional<double> baseline{};
  bool restore_best_weights = false;
  int start_from_epoch = 0;
};

class early_stopping : public callback {
 public:
  explicit early_stopping(early_stopping_options options = {})
      : options_(std::move(options)), value_(options_.monitor, options_.mode, options_.min_delta, "early_stopping") {
    if (options_.patience < 0) throw std::invalid_argument("early_stopping: patience must be at least 0");
  }

  // 0-based; 0 when training did not stop early.
  int stopped_epoch() const noexcept { return stopped_epoch_; }
  int best_epoch() const noexcept { return best_epoch_; }
  std::optional<double> best() const noexcept { return best_; }
  int wait() const noexcept { return wait_; }

  void on_train_begin() override {
    wait_ = 0;
    stopped_epoch_ = 0;
    best_.reset();
    best_weights_.clear();
    best_epoch_ = 0;
  }

  void on_epoch_end(const epoch_info& info, const logs& l) override {
    const std::optional<double> current = value_.read(l);
    if (!current || info.epoch < options_.start_from_epoch) return;
    if (options_.restore_best_weights && best_weights_.empty() && model()) {
      best_weights_ = model()->get_weight_region();  // never improved: the first monitored weights are the best
      best_epoch_ = info.epoch;
    }
    ++wait_;
    if (value_.improves(*current, best_)) {
      best_ = *current;
      best_epoch_ = info.epoch;
      if (options_.restore_best_weights && model()) best_weights_ = model()->get_weight_region();
      if (!options_.baseline || value_.improves(*current, options_.baseline)) wait_ = 0;
      return;
    }
    if (wait_ >= options_.patience && info.epoch > 0) {
      stopped_epoch_ = info.epoch;
      if (model()) model()->stop_training();
    }
  }

  std::string_view state_name() const override { return "early_stopping"; }
  void save_state(callback_state& s) const override {
    s.numbers["wait"] = wait_;
    s.numbers["stopped_epoch"] = stopped_epoch_;
    s.numbers["best_epoch"] = best_epoch_;
    if (best_) s.numbers["best"] = *best_;
    if (!best_weights_.empty()) s.tensors["best_weights"] = best_weights_;
  }
  void load_state(const callback_state& s) override {
    wait_ = static_cast<int>(s.number("wait").value_or(0));
    stopped_epoch_ = static_cast<int>(s.number("stopped_epoch").value_or(0));
    best_epoch_ = static_cast<int>(s.number("best_epoch").value_or(0));
    best_ = s.number("best");
    const auto found = s.tensors.find("best_weights");
    best_weights_ = found == s.tensors.end() ? std::vector<float>{} : found->second;
  }

  void on_train_end(const logs&) override {
    if (stopped_epoch_ > 0 && options_.verbose > 0) std::printf("Epoch %d: early stopping\n", stopped_epoch_ + 1);
    if (options_.restore_best_weights && !best_weights_.empty() && model()) {
      if (options_.verbose > 0)
        std::printf("Restoring model weights from the end of the best epoch: %d.\n", best_epoch_ + 1);
      model()->set_weight_region(best_weights_);
    }
  }

 private:
  early_stopping_options options_;
  monitored_value value_;
  int wait_ = 0;
  int stopped_epoch_ = 0;
  int best_epoch_ = 0;
  std::optional<double> best_;
  std::vector<float> best_weights_;
};

}  // namespace typeflow::callbacks

// callbacks::learning_rate_scheduler: Keras's LearningRateScheduler.
//
//   tf::callbacks::learning_rate_scheduler schedule([](int epoch, double rate) {
//     return epoch < 10 ? rate : rate * std::exp(-0.1);
//   });
//
// At the beginning of each epoch (0-based) the learning rate becomes
// schedule(epoch, current rate); a schedule of the epoch alone,
// double(int), is taken too. The optimizer must have a constant learning
// rate (a schedule of updates is refused, as Keras refuses it); the rate it
// sets is kept by a checkpoint, so a continued fit goes on from it.
#pragma once

#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>

#include "typeflow/callbacks/callback.hpp"

namespace typeflow::callbacks {

struct learning_rate_scheduler_options {
  int verbose = 0;
};

class learning_rate_scheduler : public callback {
 public:
  explicit learning_rate_scheduler(std::function<double(int epoch, double rate)> schedule,
                                   learning_rate_scheduler_options options = {})
      : schedule_(std::move(schedule)), options_(options) {
    if (!schedule_) throw std::invalid_argument("learning_rate_scheduler: the schedule is empty");
  }
  explicit learning_rate_scheduler(std::function<double(int epoch)> schedule,
                                   learning_rate_scheduler_options options = {})
      : learning_rate_scheduler(
            [s = std::move(schedule)](int epoch, double) {
              if (!s) throw std::invalid_argument("learning_rate_scheduler: the schedule is empty");
              return s(epoch);
            },
            options) {}

  void on_epoch_begin(const epoch_info& info) override {
    if (!model()) return;
    const double rate = schedule_(info.epoch, model()->learning_rate());
    if (!std::isfinite(rate) || rate < 0)
      throw std::invalid_argument("learning_rate_scheduler: the schedule returned " + std::to_string(rate) +
                                  " for epoch " + std::to_string(info.epoch) +
                                  "; a learning rate is a finite number >= 0");
    model()->set_learning_rate(rate);
    if (options_.verbose > 0)
      std::printf("\nEpoch %d: LearningRateScheduler setting learning rate to %g.\n", info.epoch + 1, rate);
  }

 private:
  std::function<double(int, double)> schedule_;
  learning_rate_scheduler_options options_;
};

}  // namespace typeflow::callbacks

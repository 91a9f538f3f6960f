// callbacks::tensorboard: Keras's TensorBoard callback, writing TensorBoard's
// event files (io/event_file.hpp) as Keras lays them out.
//
//   tf::callbacks::tensorboard board("logs/run1", {.histogram_freq = 1, .update_freq = "batch"});
//   model.fit(train, {.epochs = 5, .validation_data = test, .callbacks = {&board}});
//   // then: tensorboard --logdir logs
//
//   log_dir/train/events.out.tfevents...       "epoch_<name>" at step = epoch (0-based) for every
//                                              logged value: loss, metrics, learning_rate, loss_scale,
//                                              tokens_per_second, input_wait_fraction, mfu, ...;
//                                              "batch_<name>" at step = the batch counted over the
//                                              whole run, every update_freq batches;
//                                              each parameter's histogram ("layers.1.kernel") at
//                                              step = epoch, every histogram_freq epochs
//   log_dir/validation/events.out.tfevents...  "epoch_<name>" for each val_<name>, at step = epoch,
//                                              and "evaluation_<name>_vs_iterations" at the batch count
//
// update_freq: "epoch" (the default: epoch values only), "batch" (after every
// batch) or a number of batches; batch values are the epoch's running means,
// as fit logs them, sent to the file at least every 5 s. histogram_freq: 0
// (none, the default) or every that many epochs (epochs 0, n, 2n, ...).
// Under multi_worker only the chief writes.
// The batch count is kept in a checkpoint, so a continued run goes on with
// the same steps (in a new event file, which TensorBoard reads with the old).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "typeflow/io/event_file.hpp"
#include "typeflow/callbacks/callback.hpp"

namespace typeflow::callbacks {

// Keras's update_freq: "epoch", "batch", or a number of batches.
struct update_frequency {
  int batches = 0;  // 0: once an epoch

  update_frequency(int every_batches) : batches(every_batches) {  // NOLINT: Keras passes a number
    if (every_batches < 1)
      throw std::invalid_argument("tensorboard: update_freq must be \"epoch\", \"batch\" or a number of batches of "
                                  "at least 1 (got " + std::to_string(every_batches) + ")");
  }
  update_frequency(const char* name) : update_frequency(std::string_view(name)) {}  // NOLINT: as Keras's strings
  update_frequency(std::string_view name) {  // NOLINT
    if (name == "epoch")
      batches = 0;
    else if (name == "batch")
      batches = 1;
    else
      throw std::invalid_argument("tensorboard: update_freq must be \"epoch\", \"batch\" or a number of batches (got \"" +
                                  std::string(name) + "\")");
  }
};

struct tensorboard_options {
  std::filesystem::path log_dir = "logs";
  int histogram_freq = 0;
  update_frequency update_freq = "epoch";
};

class tensorboard : public callback {
 public:
  explicit tensorboard(tensorboard_options options = {}) : options_(std::move(options)) {
    if (options_.histogram_freq < 0)
      throw std::invalid_argument("tensorboard: histogram_freq must be 0 (no histograms) or a positive number of "
                                  "epochs (got " + std::to_string(options_.histogram_freq) + ")");
    if (options_.log_dir.empty()) throw std::invalid_argument("tensorboard: log_dir is empty");
  }
  explicit tensorboard(std::filesystem::path log_dir, tensorboard_options options = {})
      : tensorboard(with_log_dir(std::move(log_dir), std::move(options))) {}

  const std::filesystem::path& log_dir() const noexcept { return options_.log_dir; }
  // The event files written so far (empty paths before they are opened).
  std::filesystem::path train_file() const { return train_ ? train_->path() : std::filesystem::path(); }
  std::filesystem::path validation_file() const { return validation_ ? validation_->path() : std::filesystem::path(); }

  void on_train_begin() override {
    writing_ = !model() || model()->is_chief();
    validation_.reset();
    train_.reset();
    if (writing_) train_ = std::make_unique<io::event_file_writer>(options_.log_dir / "train");
    last_flush_ = std::chrono::steady_clock::now();
  }

  void on_batch_end(std::int64_t, const logs& batch_logs) override {
    ++batches_;
    if (!writing_ || options_.update_freq.batches == 0 || batches_ % options_.update_freq.batches != 0) return;
    for (const log_entry& entry : batch_logs) train_->add_scalar(tag("batch_", entry.name), entry.value, batches_);
    // Within a long epoch, TensorBoard sees the batch values every few seconds.
    const auto now = std::chrono::steady_clock::now();
    if (now - last_flush_ >= flush_interval) {
      train_->flush();
      last_flush_ = now;
    }
  }

  void on_epoch_end(const epoch_info& info, const logs& epoch_logs) override {
    const bool histograms = options_.histogram_freq > 0 && info.epoch % options_.histogram_freq == 0 && model();
    // Every worker reads the weights (under zero<3, multi_worker> gathering
    // them is a collective); the chief writes.
    if (!writing_) {
      if (histograms) model()->for_each_parameter([](std::string_view, std::span<const float>) {});
      return;
    }
    for (const log_entry& entry : epoch_logs) {
      if (entry.name.starts_with("val_")) {
        const std::string_view name = entry.name.substr(4);
        if (!validation_) validation_ = std::make_unique<io::event_file_writer>(options_.log_dir / "validation");
        validation_->add_scalar(tag("epoch_", name), entry.value, info.epoch);
        validation_->add_scalar("evaluation_" + std::string(name) + "_vs_iterations", entry.value, batches_);
      } else {
        train_->add_scalar(tag("epoch_", entry.name), entry.value, info.epoch);
      }
    }
    if (histograms)
      model()->for_each_parameter([&](std::string_view name, std::span<const float> values) {
        train_->add_histogram(name, io::histogram::of(values), info.epoch);
      });
    train_->flush();
    if (validation_) validation_->flush();
  }

  void on_train_end(const logs&) override {
    train_.reset();
    validation_.reset();
  }

  std::string_view state_name() const override { return "tensorboard"; }
  void save_state(callback_state& s) const override { s.numbers["batches"] = static_cast<double>(batches_); }
  void load_state(const callback_state& s) override {
    if (const auto b = s.number("batches")) batches_ = static_cast<std::int64_t>(*b);
  }

 private:
  static tensorboard_options with_log_dir(std::filesystem::path log_dir, tensorboard_options options) {
    options.log_dir = std::move(log_dir);
    return options;
  }
  static std::string tag(std::string_view prefix, std::string_view name) {
    return std::string(prefix) + std::string(name);
  }

  static constexpr std::chrono::seconds flush_interval{5};

  tensorboard_options options_;
  bool writing_ = true;
  std::chrono::steady_clock::time_point last_flush_{};
  std::int64_t batches_ = 0;  // batches trained over the run: the step of batch values
  std::unique_ptr<io::event_file_writer> train_, validation_;
};

}  // namespace typeflow::callbacks

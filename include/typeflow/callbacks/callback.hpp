// Callbacks: what fit tells the outside world, and the logs it passes along.
//
// Logs are a fixed-size table of (name, value) so that reporting a step's
// loss allocates nothing; names are string_views into storage that lives as
// long as the fit call.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace typeflow {

struct log_entry {
  std::string_view name;
  double value = 0;
};

struct logs {
  static constexpr std::size_t capacity = 32;
  std::array<log_entry, capacity> entries{};
  std::size_t count = 0;

  // Sets name to value, adding it if absent. Beyond capacity, extra names are
  // dropped rather than allocated.
  void set(std::string_view name, double value) noexcept {
    for (std::size_t i = 0; i < count; ++i)
      if (entries[i].name == name) {
        entries[i].value = value;
        return;
      }
    if (count < capacity) entries[count++] = {name, value};
  }
  std::optional<double> get(std::string_view name) const noexcept {
    for (std::size_t i = 0; i < count; ++i)
      if (entries[i].name == name) return entries[i].value;
    return std::nullopt;
  }
  const log_entry* begin() const noexcept { return entries.data(); }
  const log_entry* end() const noexcept { return entries.data() + count; }
  void clear() noexcept { count = 0; }
};

struct epoch_info {
  int epoch = 0;          // 0-based
  int epochs = 1;         // total epochs of this fit
  std::int64_t steps = -1;  // steps in this epoch, -1 when the dataset's size is unknown
};

// One parameter tensor as Keras's get_weights gives it: its name
// ("layers.1.kernel"), its shape ((784, 512)) and its values, row-major.
struct weight_tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

// What a callback may ask of the model that fit is training (Keras's
// self.model): fit gives every callback one before on_train_begin.
class model_access {
 public:
  virtual ~model_access() = default;
  // Keras's model.stop_training = True: fit stops after the current batch
  // (set in on_batch_end) or the current epoch (set in on_epoch_end).
  virtual void stop_training() = 0;
  virtual bool stop_requested() const = 0;
  // Whether fit stops here: this process's request, or across processes
  // (multi_worker, zero<k, multi_worker>) any worker's, a collective every
  // worker calls after each batch's and each epoch's callbacks: a custom
  // callback that stops some workers alone would leave the others waiting
  // for their collectives to the deadline.
  virtual bool stop_agreed() { return stop_requested(); }
  // The parameter region (padding included): a cheap snapshot and its
  // restore (early_stopping's restore_best_weights).
  virtual std::vector<float> get_weight_region() const = 0;
  virtual void set_weight_region(std::span<const float> region) = 0;
  // Keras's get_weights and set_weights: one weight_tensor per parameter, in
  // the model's order (model::get_weights, model::set_weights).
  virtual std::vector<weight_tensor> get_weights() const { return {}; }
  virtual void set_weights(const std::vector<weight_tensor>&) {
    throw std::logic_error("set_weights: this model_access does not give tensors");
  }
  virtual void save_weights(const std::filesystem::path& path) = 0;
  // model.save_checkpoint(dir, {.keep = keep}): written during fit, it holds
  // fit's position, History and callbacks' state too (docs/checkpoints.md).
  virtual std::filesystem::path save_checkpoint(const std::filesystem::path& dir, int keep = 3) = 0;
  // model.load_checkpoint(dir): called from on_train_begin, the fit being
  // started continues where the checkpoint's fit was (backup_and_restore).
  virtual void load_checkpoint(const std::filesystem::path& dir) = 0;
  virtual bool is_chief() const = 0;  // multi_worker: rank 0; write files only there
  // Across processes (multi_worker, zero<k, multi_worker>): each value of
  // `l` becomes its mean over the job's workers, a collective that every
  // worker calls (fit does at each epoch's end, so that callbacks decide
  // alike everywhere, as Keras reduces its logs across replicas); elsewhere
  // nothing.
  virtual void mean_over_workers(logs& /*l*/) {}
  // Keras's model.optimizer.learning_rate: the next update's rate, and its
  // replacement by a constant (refused when compile() was given a schedule,
  // as Keras refuses it).
  virtual double learning_rate() const = 0;
  virtual void set_learning_rate(double rate) = 0;
  // The optimizer's moving average (use_ema): exchanged with the weights,
  // and whether the average is in the weights now (swap_ema_weights).
  virtual void swap_ema_weights() = 0;
  virtual bool ema_weights_in_model() const = 0;
  // Keras's optimizer.finalize_variable_values: with use_ema, the weights
  // become the average. fit calls it before on_train_end.
  virtual void finalize_variable_values() = 0;
  // What a report shows of the model (callbacks::tensorboard's histograms,
  // callbacks::html_report): each parameter tensor's name and values, padding
  // left out, in arena order; the summary table (summary.hpp) within
  // line_length columns (0: no limit); and the run's settings as (name, value)
  // rows: policy, strategy, device, optimizer, loss, metrics, batch size.
  // A model_access of one's own may leave them empty.
  virtual void for_each_parameter(const std::function<void(std::string_view, std::span<const float>)>&) const {}
  virtual std::string summary_text(std::size_t /*line_length*/) const { return {}; }
  virtual std::vector<std::pair<std::string, std::string>> settings() const { return {}; }
};

// What a callback keeps across an interruption: a checkpoint written during
// fit holds each callback's state, and the fit that continues from it gives
// it back (numbers in the manifest, float arrays as tensors).
struct callback_state {
  std::map<std::string, double> numbers;
  std::map<std::string, std::vector<float>> tensors;
  std::optional<double> number(const std::string& key) const {
    const auto found = numbers.find(key);
    return found == numbers.end() ? std::nullopt : std::optional<double>(found->second);
  }
};

class callback {
 public:
  virtual ~callback() = default;
  // Called by fit before on_train_begin.
  void set_model(model_access* m) noexcept { model_ = m; }
  // The model being trained; nullptr outside fit.
  model_access* model() const noexcept { return model_; }

  virtual void on_train_begin() {}
  virtual void on_epoch_begin(const epoch_info&) {}
  // Before and after each training step (Keras's on_train_batch_begin and
  // on_train_batch_end): step is 1-based within the epoch; logs hold
  // running means over the epoch.
  virtual void on_batch_begin(std::int64_t /*step*/) {}
  virtual void on_batch_end(std::int64_t /*step*/, const logs&) {}
  // Around evaluate, and fit's validation at an epoch's end (Keras's
  // on_test_begin / on_test_end), and each of its batches (batch 1-based;
  // logs hold the running means).
  virtual void on_test_begin() {}
  virtual void on_test_end(const logs&) {}
  virtual void on_test_batch_begin(std::int64_t /*batch*/) {}
  virtual void on_test_batch_end(std::int64_t /*batch*/, const logs&) {}
  // Around predict, and each of its batches.
  virtual void on_predict_begin() {}
  virtual void on_predict_end() {}
  virtual void on_predict_batch_begin(std::int64_t /*batch*/) {}
  virtual void on_predict_batch_end(std::int64_t /*batch*/) {}
  // logs hold the epoch's means, and val_* entries when fit validated.
  virtual void on_epoch_end(const epoch_info&, const logs&) {}
  virtual void on_train_end(const logs&) {}
  // A step's loss or gradient was not finite (train/non_finite.hpp) and its
  // update was not applied. A callback that returns true takes that as the
  // end of the run, which fit then ends cleanly (callbacks::terminate_on_nan
  // does); when none does, fit throws the non_finite_error. epoch is 0-based,
  // batch 1-based in it; reason says what was not finite, where.
  virtual bool ends_run_on_non_finite(int /*epoch*/, std::int64_t /*batch*/, const std::string& /*reason*/) {
    return false;
  }

  // Its state for a checkpoint, under state_name() (e.g. "early_stopping"):
  // what it must remember to behave after a resume as if never stopped.
  // A callback without state writes nothing.
  virtual std::string_view state_name() const { return "callback"; }
  virtual void save_state(callback_state&) const {}
  // Called after on_train_begin, when fit continues from a checkpoint that
  // holds this callback's state.
  virtual void load_state(const callback_state&) {}

 private:
  model_access* model_ = nullptr;
};

}  // namespace typeflow

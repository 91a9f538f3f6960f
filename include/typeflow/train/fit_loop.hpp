// fit_loop: fit's loop over the epochs and batches, written once for every
// device over a training_state (train/training_state.hpp) and the device's
// steps: the callbacks' hooks, the progress bar, History, validation,
// resuming a fit from a checkpoint, and the input and step timings.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "typeflow/data/any_dataset.hpp"
#include "typeflow/data/example.hpp"
#include "typeflow/callbacks/callback.hpp"
#include "typeflow/train/fit_snapshot.hpp"
#include "typeflow/callbacks/history.hpp"
#include "typeflow/train/non_finite.hpp"
#include "typeflow/callbacks/progress_bar.hpp"
#include "typeflow/train/training_state.hpp"

namespace typeflow {

namespace detail {

// A fit warning: kept in its History, and on stderr by the chief (once per job).
inline void warn(history& result, bool chief, std::string message) {
  if (chief) std::fprintf(stderr, "typeflow warning: %s\n", message.c_str());
  result.warnings.push_back(std::move(message));
}

// The shortest decimal that reads back as value (a loss scale: 0.001953125).
inline std::string shortest(double value) {
  char text[32];
  return {text, std::to_chars(text, text + sizeof text, value).ptr};
}

}  // namespace detail

// fit's loop over the epochs, written once for every device. Steps runs the
// training steps of one device and strategy:
//   stage(batch, parity)   takes batch k (parity k % 2) before step k;
//   launch(parity)         starts step k (the CPU runs it whole; a GPU enqueues it);
//   finish(parity)         waits for step k, then updates state's loss mean,
//                          metrics and iterations;
//   samples(parity)        step k's batch's valid samples;
//   validate(data, callbacks)  evaluates `data` into state's means (inference mode),
//                          calling the callbacks' test batch hooks;
//   loss_scale(), skipped_steps()   for mixed_float16's logs.
// Batch k + 1 is read and staged between launch(k) and finish(k), so a GPU
// computes while the pipeline produces; it is read into the other of two
// batches, since finish(k) still reads batch k (the CPU stages a batch by
// reference, and its metrics read the labels there). The input wait is the time next()
// and stage() take; the step time is launch() and finish().
//
// After every callback's on_train_begin, a checkpoint loaded before fit or in
// on_train_begin (state.resume, fit_snapshot.hpp) says where to continue:
// its epoch, its batch within it (the data reopened with the epoch's key and
// the trained batches skipped), its means, History and callbacks' state.
template <class Net, bool LossScaling, class Steps, data::batched_dataset Dataset>
history fit_loop(training_state<Net>& state, Steps& steps, const Dataset& train,
                 fit_options<typename Dataset::element_type> options, model_access& access) {
  if (options.initial_epoch < 0)
    throw std::invalid_argument("fit: initial_epoch must not be negative (got " + std::to_string(options.initial_epoch) +
                                ")");
  const bool chief = access.is_chief();
  using batch_type = typename Dataset::element_type;
  history result;
  history_recorder recorder{result};
  std::unique_ptr<progress_bar> bar;
  if (!chief) options.verbose = 0;  // one progress bar per job, the chief's
  if (options.verbose == 1) bar = std::make_unique<progress_bar>(stdout);
  if (options.verbose == 2) bar = std::make_unique<progress_bar>(stdout, progress_bar::display::lines);
  // The recorder last, as Keras's History: the epoch it records allocates
  // after every other callback has run (a checkpoint written in on_epoch_end
  // adds that epoch's logs itself: fit_in_progress::epoch_end_logs).
  std::vector<callback*> callbacks;
  if (bar) callbacks.push_back(bar.get());
  callbacks.insert(callbacks.end(), options.callbacks.begin(), options.callbacks.end());
  callbacks.push_back(&recorder);
  bool terminated = false;
  std::int64_t trained_steps = 0;  // by this fit
  for (auto* c : callbacks) c->set_model(&access);
  struct release_model {  // callback::model() is nullptr outside fit
    std::vector<callback*>& callbacks;
    ~release_model() {
      for (auto* c : callbacks) c->set_model(nullptr);
    }
  } release{callbacks};

  typename training_state<Net>::fit_in_progress position{options.initial_epoch, 0, &result, options.callbacks, nullptr};
  state.running_fit = &position;
  struct clear_on_exit {
    training_state<Net>& state;
    ~clear_on_exit() { state.running_fit = nullptr; }
  } clear{state};

  if (!(options.peak_flops >= 0) && !(options.peak_flops < 0))
    throw std::invalid_argument("fit: peak_flops is not a number");
  if (options.steps_per_epoch == 0 || options.steps_per_epoch < -1)
    throw std::invalid_argument("fit: steps_per_epoch must be positive, or -1 for the whole dataset (got " +
                                std::to_string(options.steps_per_epoch) + ")");
  if (options.validation_steps == 0 || options.validation_steps < -1)
    throw std::invalid_argument("fit: validation_steps must be positive, or -1 for all of validation_data (got " +
                                std::to_string(options.validation_steps) + ")");
  const std::int64_t step_limit = options.steps_per_epoch;  // -1: none
  // A batch fit trains: a full one, or a last partial one (training_step.hpp).
  const auto trains = [](const batch_type& b) { return b.valid > 0; };
  std::int64_t epoch_steps = train.cardinality() < 0 ? -1 : train.cardinality();
  if (step_limit > 0) epoch_steps = epoch_steps < 0 ? step_limit : std::min(epoch_steps, step_limit);
  // validation_steps: the first batches of the validation data only.
  data::any_dataset<batch_type> validation = options.validation_data;
  if (options.validation_data && options.validation_steps > 0)
    validation = options.validation_data.first(options.validation_steps);
  std::array<batch_type, 2> batches;  // by parity: batch k stays whole until finish(k)
  logs step_logs, epoch_logs;
  using clock = std::chrono::steady_clock;
  // The logs after a step: the epoch's means so far, and the run's gauges
  // over the samples trained since the epoch (re)started (a last partial
  // batch counts its valid samples: mfu and tokens/s count the model's work).
  const auto fill_step_logs = [&](std::int64_t samples_timed, clock::duration waited, clock::duration stepped) {
    state.fill_logs(step_logs, "");
    if constexpr (LossScaling) {  // mixed_float16: Keras's LossScaleOptimizer state
      step_logs.set("loss_scale", steps.loss_scale());
      step_logs.set("skipped_steps", static_cast<double>(steps.skipped_steps()));
    }
    step_logs.set("learning_rate", state.optimizer->learning_rate(state.iterations + 1));  // the next update's
    if (samples_timed == 0) return;
    const double seconds = std::chrono::duration<double>(waited + stepped).count();
    step_logs.set("input_wait_fraction", std::chrono::duration<double>(waited).count() / seconds);
    const double step_seconds = std::chrono::duration<double>(stepped).count();
    if (options.peak_flops > 0 && step_seconds > 0)  // the model's FLOPs per second over the machine's peak
      step_logs.set("mfu", static_cast<double>(samples_timed) * training_flops_per_step<Net, 1> / step_seconds /
                               options.peak_flops);
    if constexpr (std::is_same_v<typename Net::input_dtype, int32>)  // a language model: tokens per second
      step_logs.set("tokens_per_second",
                    static_cast<double>(samples_timed * static_cast<std::int64_t>(Net::input_shape_type::size)) / seconds);
  };
  for (auto* c : callbacks) c->on_train_begin();

  // Continuing a fit from a checkpoint.
  std::optional<fit_snapshot> resume = std::move(state.resume);
  state.resume.reset();
  if (resume) {
    position.epoch = resume->epoch;
    result.values = std::move(resume->history);
    for (std::size_t i = 0; i < options.callbacks.size(); ++i) {
      const auto found = resume->callbacks.find(training_state<Net>::callback_state_key(i, *options.callbacks[i]));
      if (found != resume->callbacks.end()) options.callbacks[i]->load_state(found->second);
    }
  }

  for (int epoch = position.epoch; epoch < options.epochs; ++epoch) {
    const epoch_info info{epoch, options.epochs, epoch_steps};
    position.epoch = epoch;
    position.step = 0;
    for (auto* c : callbacks) c->on_epoch_begin(info);
    state.reset_metrics();
    std::int64_t step = 0;
    const bool continuing = resume && resume->step > 0 && epoch == resume->epoch;
    auto cursor = train.open(continuing ? resume->epoch_key : state.epoch_counter++);
    if (continuing) {
      // The batches the checkpoint's fit had trained in this epoch, read again and skipped.
      for (; step < resume->step; ++step)
        if (!cursor.next(batches[0]) || !trains(batches[0]))
          throw std::invalid_argument("fit: the checkpoint continues epoch " + std::to_string(epoch + 1) +
                                      " after batch " + std::to_string(resume->step) + ", but the training data has only " +
                                      std::to_string(step) + " full batches in that epoch; continue with the same data");
      state.restore_means(resume->means);
      position.step = step;
      fill_step_logs(0, {}, {});
    }
    resume.reset();
    const std::int64_t updates_before = state.iterations;
    std::int64_t skipped_before = 0;
    if constexpr (LossScaling) skipped_before = steps.skipped_steps();
    clock::duration waited{}, stepped{};
    std::int64_t samples_timed = 0;
    int parity = 0;
    auto mark = clock::now();
    bool have = (step_limit < 0 || step < step_limit) && cursor.next(batches[parity]) && trains(batches[parity]);
    if (have) steps.stage(batches[parity], parity);
    waited += clock::now() - mark;
    while (have) {
      bool next = false;
      for (auto* c : callbacks) c->on_batch_begin(step + 1);
      try {
        mark = clock::now();
        steps.launch(parity);
        stepped += clock::now() - mark;
        mark = clock::now();
        batch_type& following = batches[static_cast<std::size_t>(1 - parity)];
        next = (step_limit < 0 || step + 1 < step_limit) && cursor.next(following) && trains(following);
        if (next) steps.stage(following, 1 - parity);
        waited += clock::now() - mark;
        mark = clock::now();
        steps.finish(parity);
        stepped += clock::now() - mark;
      } catch (const non_finite_error& e) {
        const std::string where = "fit: epoch " + std::to_string(epoch + 1) + ", batch " + std::to_string(step + 1) +
                                  " (update " + std::to_string(state.iterations + 1) + "): ";
        // The user's callbacks decide (callbacks::terminate_on_nan ends the run); every one is told.
        for (auto* c : options.callbacks)
          terminated = c->ends_run_on_non_finite(epoch, step + 1, where + e.what()) || terminated;
        if (!terminated)
          throw non_finite_error(where + e.what() + "; the update was not applied, so the weights are the last "
                                                    "good step's (see callbacks::terminate_on_nan to end the run "
                                                    "cleanly instead)",
                                 e.tensor());
        break;
      }
      ++step;
      ++trained_steps;
      position.step = step;
      samples_timed += steps.samples(parity);
      fill_step_logs(samples_timed, waited, stepped);
      for (auto* c : callbacks) c->on_batch_end(step, step_logs);
      if (access.stop_agreed()) break;  // across processes a collective: every worker stops alike
      have = next;
      parity = 1 - parity;
    }
    if (step == 0 && !terminated)
      throw std::invalid_argument("fit: epoch " + std::to_string(epoch + 1) +
                                  " had no sample to train on; the dataset is empty");
    epoch_logs = step_logs;
    if (options.validation_data) {
      for (auto* c : callbacks) c->on_test_begin();
      steps.validate(validation, callbacks);
      state.fill_logs(epoch_logs, "val_");
      for (auto* c : callbacks) c->on_test_end(epoch_logs);
    }
    // Across workers each saw its shard: the job's means, so that
    // early_stopping, model_checkpoint's save_best_only and the History
    // decide and read alike on every worker (a collective save or stop
    // taken on some workers alone would leave the others waiting).
    access.mean_over_workers(epoch_logs);
    position.epoch = epoch + 1;  // a checkpoint written from here on continues at the next epoch
    position.step = 0;
    position.epoch_end_logs = &epoch_logs;
    for (auto* c : callbacks) c->on_epoch_end(info, epoch_logs);
    position.epoch_end_logs = nullptr;
    if constexpr (LossScaling) {
      // Every update skipped: the loss scale halved each time and the weights
      // never moved. fit goes on, as Keras's LossScaleOptimizer does, but says so.
      const std::int64_t skipped = steps.skipped_steps() - skipped_before;
      if (skipped > 0 && state.iterations == updates_before)
        detail::warn(result, chief,
                     "fit: epoch " + std::to_string(epoch + 1) + " applied no update: all " +
                         std::to_string(skipped) +
                         " were skipped for non-finite gradients under mixed_float16 (loss scale now " +
                         detail::shortest(steps.loss_scale()) +
                         "), so the weights did not change; look for NaN or Inf in the data or a loss that diverges");
    }
    if (access.stop_agreed() || terminated) break;
  }
  if (trained_steps > 0) access.finalize_variable_values();
  for (auto* c : callbacks) c->on_train_end(epoch_logs);
  return result;
}

}  // namespace typeflow

// callbacks::model_checkpoint: Keras's ModelCheckpoint, with its arguments.
//
//   tf::callbacks::model_checkpoint best("best.safetensors", {.monitor = "val_accuracy",
//                                        .save_best_only = true, .save_weights_only = true});
//   tf::callbacks::model_checkpoint every("ckpt", {.save_freq = 500});   // a checkpoint every 500 batches
//
// save_weights_only writes model.save_weights(path) (safetensors); otherwise
// model.save_checkpoint(path), a directory of checkpoints (weights, optimizer
// state, counters: everything to continue). The path may hold Keras's
// placeholders, formatted when saving: {epoch} (1-based, as Keras), {batch},
// and any logged value, each with an optional printf-style spec, e.g.
// "w-{epoch:02d}-{val_loss:.2f}.safetensors". save_freq 0 saves after each
// epoch (Keras's "epoch"); n > 0 every n batches. With save_best_only, only
// a save whose monitored value improves on the best so far (or on
// initial_value_threshold) is written. Only the chief writes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

#include "typeflow/callbacks/monitor.hpp"
#include "typeflow/train/callback.hpp"

namespace typeflow::callbacks {

struct model_checkpoint_options {
  std::string monitor = "val_loss";
  int verbose = 0;
  bool save_best_only = false;
  bool save_weights_only = false;
  std::string_view mode = "auto";
  std::int64_t save_freq = 0;  // 0: each epoch ("epoch"); n > 0: every n batches
  std::optional<double> initial_value_threshold{};
};

namespace detail {

// filepath with {name} and {name:spec} replaced: epoch (1-based), batch, or a logged value.
inline std::string format_filepath(const std::string& pattern, int epoch, std::int64_t batch, const logs& l) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '{') {
      out += pattern[i];
      continue;
    }
    const std::size_t close = pattern.find('}', i);
    if (close == std::string::npos)
      throw std::invalid_argument("model_checkpoint: an unclosed '{' in the file path \"" + pattern + "\"");
    const std::string field = pattern.substr(i + 1, close - i - 1);
    const std::size_t colon = field.find(':');
    const std::string name = field.substr(0, colon), spec = colon == std::string::npos ? "" : field.substr(colon + 1);
    char text[128];
    if (name == "epoch" || name == "batch") {
      const long long v = name == "epoch" ? epoch + 1 : batch;
      const std::string format = "%" + (spec.empty() ? std::string("d") : spec);
      if (format.back() != 'd')
        throw std::invalid_argument("model_checkpoint: {" + field + "} takes an integer spec such as 02d");
      std::snprintf(text, sizeof text, (format.substr(0, format.size() - 1) + "lld").c_str(), v);
    } else {
      const auto v = l.get(name);
      if (!v)
        throw std::invalid_argument("model_checkpoint: the file path \"" + pattern + "\" names \"" + name +
                                    "\", which is not in the logs");
      const std::string format = "%" + (spec.empty() ? std::string("g") : spec);
      const char kind = format.back();
      if (kind != 'f' && kind != 'e' && kind != 'g')
        throw std::invalid_argument("model_checkpoint: {" + field + "} takes a float spec such as .4f");
      std::snprintf(text, sizeof text, format.c_str(), *v);
    }
    out += text;
    i = close;
  }
  return out;
}

}  // namespace detail

class model_checkpoint : public callback {
 public:
  explicit model_checkpoint(std::filesystem::path filepath, model_checkpoint_options options = {})
      : filepath_(filepath.string()), options_(std::move(options)),
        value_(options_.monitor, options_.mode, 0.0, "model_checkpoint"), best_(options_.initial_value_threshold) {
    if (options_.save_freq < 0) throw std::invalid_argument("model_checkpoint: save_freq must be 0 (each epoch) or positive");
  }

  std::optional<double> best() const noexcept { return best_; }
  // The last file or checkpoint written (empty before the first).
  const std::filesystem::path& last_saved() const noexcept { return last_saved_; }

  void on_epoch_begin(const epoch_info& info) override { epoch_ = info.epoch; }

  void on_batch_end(std::int64_t step, const logs& l) override {
    if (options_.save_freq == 0) return;
    if (++batches_since_save_ >= options_.save_freq) {
      batches_since_save_ = 0;
      save(step, l);
    }
  }

  void on_epoch_end(const epoch_info& info, const logs& l) override {
    epoch_ = info.epoch;
    if (options_.save_freq == 0) save(0, l);
  }

  std::string_view state_name() const override { return "model_checkpoint"; }
  void save_state(callback_state& s) const override {
    if (best_) s.numbers["best"] = *best_;
    s.numbers["batches_since_save"] = static_cast<double>(batches_since_save_);
  }
  void load_state(const callback_state& s) override {
    best_ = s.number("best");
    batches_since_save_ = static_cast<std::int64_t>(s.number("batches_since_save").value_or(0));
  }

 private:
  void save(std::int64_t batch, const logs& l) {
    if (!model()) return;
    if (options_.save_best_only) {
      const std::optional<double> current = value_.read(l);
      if (!current) return;
      if (!value_.improves(*current, best_)) {
        if (options_.verbose > 0)
          std::printf("\nEpoch %d: %s did not improve from %.5f\n", epoch_ + 1, value_.monitor().c_str(), *best_);
        return;
      }
      if (options_.verbose > 0 && best_)
        std::printf("\nEpoch %d: %s improved from %.5f to %.5f, saving model\n", epoch_ + 1, value_.monitor().c_str(),
                    *best_, *current);
      best_ = *current;
    }
    const std::filesystem::path path = detail::format_filepath(filepath_, epoch_, batch, l);
    if (!model()->is_chief()) return;
    if (options_.save_weights_only)
      model()->save_weights(path);
    else
      model()->save_checkpoint(path);
    last_saved_ = path;
    if (options_.verbose > 0) std::printf("\nEpoch %d: saving model to %s\n", epoch_ + 1, path.c_str());
  }

  std::string filepath_;
  model_checkpoint_options options_;
  monitored_value value_;
  std::optional<double> best_;
  int epoch_ = 0;
  std::int64_t batches_since_save_ = 0;
  std::filesystem::path last_saved_;
};

}  // namespace typeflow::callbacks

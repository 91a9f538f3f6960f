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
#include <string_view>
#include <vector>

#include "typeflow/callbacks/monitor.hpp"
#include "typeflow/core/excerpt.hpp"
#include "typeflow/callbacks/callback.hpp"

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

// A placeholder's spec as a printf format: Python's subset that Keras's
// file paths use, [flags][width][.precision][type], flags from "-+ 0#",
// width and precision of at most two digits, type one of `types`
// (`fallback` when absent). Nothing else reaches printf: not '%n', '*',
// length modifiers or a '%' of the user's.
inline std::string printf_format(const std::string& field, const std::string& spec, std::string_view types,
                                 char fallback) {
  std::size_t i = 0;
  while (i < spec.size() && std::string_view("-+ 0#").find(spec[i]) != std::string_view::npos) ++i;
  const auto digits = [&] {
    const std::size_t start = i;
    while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') ++i;
    return i - start;
  };
  bool good = i <= 5 && digits() <= 2;
  if (good && i < spec.size() && spec[i] == '.') {
    ++i;
    const std::size_t precision = digits();
    good = precision >= 1 && precision <= 2;
  }
  char type = fallback;
  if (good && i < spec.size()) type = spec[i++];
  if (!good || i != spec.size() || types.find(type) == std::string_view::npos)
    throw std::invalid_argument("model_checkpoint: {" + excerpt(field) + "}: \"" + excerpt(spec) +
                                "\" is not a spec of the form [flags][width][.precision][type] with a type of \"" +
                                std::string(types) + "\" (e.g. 02d, .4f)");
  const std::string body = spec.substr(0, spec.empty() || types.find(spec.back()) == std::string_view::npos
                                               ? spec.size()
                                               : spec.size() - 1);
  return "%" + body + (type == 'd' ? std::string("lld") : std::string(1, type));
}

// Each {name} or {name:spec} of a file path: its name, spec and printf format.
struct placeholder {
  std::size_t begin = 0, end = 0;  // pattern[begin, end) is "{...}"
  std::string name, format;
};
inline std::vector<placeholder> placeholders(const std::string& pattern) {
  std::vector<placeholder> found;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '{') continue;
    const std::size_t close = pattern.find('}', i);
    if (close == std::string::npos)
      throw std::invalid_argument("model_checkpoint: an unclosed '{' in the file path \"" + excerpt(pattern) + "\"");
    const std::string field = pattern.substr(i + 1, close - i - 1);
    const std::size_t colon = field.find(':');
    placeholder p{i, close + 1, field.substr(0, colon), ""};
    const std::string spec = colon == std::string::npos ? "" : field.substr(colon + 1);
    const bool whole = p.name == "epoch" || p.name == "batch";
    p.format = whole ? printf_format(field, spec, "d", 'd') : printf_format(field, spec, "feg", 'g');
    found.push_back(std::move(p));
    i = close;
  }
  return found;
}

// filepath with {name} and {name:spec} replaced: epoch (1-based), batch, or a logged value.
inline std::string format_filepath(const std::string& pattern, int epoch, std::int64_t batch, const logs& l) {
  std::string out;
  std::size_t at = 0;
  for (const placeholder& p : placeholders(pattern)) {
    out.append(pattern, at, p.begin - at);
    at = p.end;
    char text[160];  // width and precision are at most 99: a double's %99.99f fits
    if (p.name == "epoch" || p.name == "batch") {
      std::snprintf(text, sizeof text, p.format.c_str(), p.name == "epoch" ? static_cast<long long>(epoch) + 1 : static_cast<long long>(batch));
    } else {
      const auto v = l.get(p.name);
      if (!v)
        throw std::invalid_argument("model_checkpoint: the file path \"" + excerpt(pattern) + "\" names \"" +
                                    excerpt(p.name) + "\", which is not in the logs");
      std::snprintf(text, sizeof text, p.format.c_str(), *v);
    }
    out += text;
  }
  out.append(pattern, at, std::string::npos);
  return out;
}

}  // namespace detail

class model_checkpoint : public callback {
 public:
  explicit model_checkpoint(std::filesystem::path filepath, model_checkpoint_options options = {})
      : filepath_(filepath.string()), options_(std::move(options)),
        value_(options_.monitor, options_.mode, 0.0, "model_checkpoint"), best_(options_.initial_value_threshold) {
    if (options_.save_freq < 0) throw std::invalid_argument("model_checkpoint: save_freq must be 0 (each epoch) or positive");
    (void)detail::placeholders(filepath_);  // a bad spec is refused here, not mid-fit
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
    // Every save_freq batches the logs are each worker's running means: the
    // job's, so that every worker decides alike and names the same file
    // (the epoch's logs are the job's already).
    logs job = l;
    if (batch > 0) model()->mean_over_workers(job);
    if (options_.save_best_only) {
      const std::optional<double> current = value_.read(job);
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
    const std::filesystem::path path = detail::format_filepath(filepath_, epoch_, batch, job);
    // Every worker calls the save, and the chief writes: under zero<k,
    // multi_worker> each worker holds a shard, and saving is a collective.
    if (options_.save_weights_only)
      model()->save_weights(path);
    else
      model()->save_checkpoint(path);
    last_saved_ = path;
    if (options_.verbose > 0 && model()->is_chief())
      std::printf("\nEpoch %d: saving model to %s\n", epoch_ + 1, path.c_str());
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

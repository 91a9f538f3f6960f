// History: every epoch's logs, by metric name, like Keras's History object.
//
// fit records one value per epoch for each name its epoch-end logs carry
// ("loss", "accuracy", and "val_loss", ... when it validated). A name that
// appears only in some epochs (validation every other epoch, say) has fewer
// values than epochs(); values are appended in epoch order either way.
//
//   history h;
//   history_recorder recorder{h};       // pass &recorder to fit as a callback
//   ...
//   h["val_loss"].back();               // the last epoch's validation loss
#pragma once

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "typeflow/callbacks/callback.hpp"

namespace typeflow {

class history {
 public:
  // name -> one value per recorded epoch, in epoch order.
  std::map<std::string, std::vector<double>> values;
  // What fit warned of, in order, each also written to stderr: e.g. an epoch
  // of mixed_float16 whose every update was skipped (train/fit_loop.hpp).
  std::vector<std::string> warnings;

  // The values recorded under name. Throws std::out_of_range naming the
  // missing key and listing the names that were recorded.
  const std::vector<double>& operator[](std::string_view name) const {
    auto found = values.find(std::string(name));
    if (found == values.end()) throw std::out_of_range(missing_key_message(name));
    return found->second;
  }

  bool contains(std::string_view name) const { return values.contains(std::string(name)); }

  // The number of epochs recorded: the longest series, since every epoch logs
  // at least its loss.
  int epochs() const noexcept {
    std::size_t longest = 0;
    for (const auto& [name, series] : values) longest = std::max(longest, series.size());
    return static_cast<int>(longest);
  }

  // Appends one epoch's logs: each entry's value to the series of its name.
  void record(const logs& epoch_logs) {
    for (const log_entry& entry : epoch_logs) values[std::string(entry.name)].push_back(entry.value);
  }

 private:
  std::string missing_key_message(std::string_view name) const {
    std::string message = "history has no metric \"";
    message += name;
    message += "\"; ";
    if (values.empty()) return message + "nothing has been recorded yet";
    message += "it recorded: ";
    bool first = true;
    for (const auto& [recorded, series] : values) {
      if (!first) message += ", ";
      message += recorded;
      first = false;
    }
    return message;
  }
};

// The callback that fills a history: appends each epoch's end-of-epoch logs.
// It never clears the history, so one history can span several fit calls;
// give each fit a fresh history to keep them apart.
class history_recorder : public callback {
 public:
  explicit history_recorder(history& target) noexcept : target_(&target) {}

  void on_epoch_end(const epoch_info&, const logs& epoch_logs) override { target_->record(epoch_logs); }

 private:
  history* target_;
};

}  // namespace typeflow

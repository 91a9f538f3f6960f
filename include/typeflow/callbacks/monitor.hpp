// What early_stopping, model_checkpoint (and the learning-rate callbacks)
// share: a monitored log entry, its mode and what counts as better.
//
// mode "min" or "max", or "auto" (Keras's default): "max" when the name
// (without "val_") contains "acc" or ends with "auc", as accuracies and AUCs
// grow; "min" otherwise (losses). An improvement beats the reference by more
// than min_delta (Keras's _is_improvement: monitor_op(value - min_delta,
// reference), min_delta negated for "min").
#pragma once

#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "typeflow/callbacks/callback.hpp"

namespace typeflow::callbacks {

class monitored_value {
 public:
  monitored_value(std::string monitor, std::string_view mode, double min_delta, const char* who)
      : monitor_(std::move(monitor)), who_(who) {
    if (mode != "auto" && mode != "min" && mode != "max")
      throw std::invalid_argument(std::string(who) + ": mode must be \"auto\", \"min\" or \"max\"; got \"" +
                                  std::string(mode) + "\"");
    if (!std::isfinite(min_delta))
      throw std::invalid_argument(std::string(who) + ": min_delta must be finite");
    if (mode == "auto") {
      std::string_view name = monitor_;
      if (name.rfind("val_", 0) == 0) name.remove_prefix(4);
      greater_ = name.find("acc") != std::string_view::npos ||
                 (name.size() >= 3 && name.substr(name.size() - 3) == "auc");
    } else {
      greater_ = mode == "max";
    }
    min_delta_ = greater_ ? std::fabs(min_delta) : -std::fabs(min_delta);
  }

  const std::string& monitor() const noexcept { return monitor_; }
  bool greater_is_better() const noexcept { return greater_; }

  // Whether value improves on reference (always, without a reference).
  bool improves(double value, std::optional<double> reference) const {
    if (!reference) return true;
    return greater_ ? value - min_delta_ > *reference : value - min_delta_ < *reference;
  }

  // The monitored entry of logs; a missing one is warned about once, as Keras does.
  std::optional<double> read(const logs& l) {
    const auto v = l.get(monitor_);
    if (!v && !warned_) {
      std::fprintf(stderr, "%s: the monitored value \"%s\" is not in the logs; available: ", who_, monitor_.c_str());
      for (const auto& e : l) std::fprintf(stderr, "%.*s ", static_cast<int>(e.name.size()), e.name.data());
      std::fprintf(stderr, "\n");
      warned_ = true;
    }
    return v;
  }

 private:
  std::string monitor_;
  const char* who_;
  bool greater_ = false;
  double min_delta_ = 0;
  bool warned_ = false;
};

}  // namespace typeflow::callbacks

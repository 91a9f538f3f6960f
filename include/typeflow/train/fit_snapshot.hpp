// fit_snapshot: where a fit stood when a checkpoint was written during it
// (by a callback: backup_and_restore, model_checkpoint, a lambda), and what
// it had gathered. The fit that continues from that checkpoint restores it:
// it starts at the same epoch and batch, reopens the training data with the
// same epoch key and skips the batches already trained (every pipeline here
// is a function of its epoch key, so the batches that follow are the same),
// puts back the epoch's running loss and metric means, the History of the
// epochs before, and each callback's state.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "typeflow/io/json_fields.hpp"
#include "typeflow/callbacks/callback.hpp"
#include "typeflow/io/compiled.hpp"

namespace typeflow {

struct fit_snapshot {
  int epoch = 0;                // the epoch (0-based, of that fit) to continue at
  std::int64_t step = 0;        // its batches already trained (0: it starts afresh)
  std::uint64_t epoch_key = 0;  // its shuffle key, when step > 0
  std::map<std::string, std::vector<double>> history;  // the completed epochs' logs
  std::map<std::string, std::vector<double>> means;    // step > 0: "loss", "regularization_loss", each metric
  std::map<std::string, callback_state> callbacks;     // by "<position in fit's list>.<state_name>"
};

namespace detail {
// JSON has no NaN or infinity: they are written as strings.
inline nlohmann::ordered_json json_number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}
inline double number_from_json(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  const std::string s = j.get<std::string>();
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  throw std::invalid_argument("\"" + s + "\" is not a number");
}
inline nlohmann::ordered_json json_numbers(const std::vector<double>& values) {
  auto a = nlohmann::ordered_json::array();
  for (double v : values) a.push_back(json_number(v));
  return a;
}
inline std::vector<double> numbers_from_json(const nlohmann::json& j) {
  std::vector<double> out;
  for (const auto& v : j) out.push_back(number_from_json(v));
  return out;
}
}  // namespace detail

// The manifest's "fit" object (the callbacks' tensors go beside the others,
// as "callbacks.<key>.<name>").
TYPEFLOW_IO_INLINE nlohmann::ordered_json fit_snapshot_json(const fit_snapshot& s)
#if TYPEFLOW_IO_DEFINITIONS
{
  nlohmann::ordered_json history = nlohmann::ordered_json::object(), means = nlohmann::ordered_json::object(),
                         callbacks = nlohmann::ordered_json::object();
  for (const auto& [name, values] : s.history) history[name] = detail::json_numbers(values);
  for (const auto& [name, values] : s.means) means[name] = detail::json_numbers(values);
  for (const auto& [key, state] : s.callbacks) {
    nlohmann::ordered_json numbers = nlohmann::ordered_json::object();
    for (const auto& [name, v] : state.numbers) numbers[name] = detail::json_number(v);
    auto tensors = nlohmann::ordered_json::array();
    for (const auto& [name, v] : state.tensors) tensors.push_back(name);
    callbacks[key] = {{"numbers", numbers}, {"tensors", tensors}};
  }
  return {{"epoch", s.epoch}, {"step", s.step},         {"epoch_key", s.epoch_key},
          {"history", history}, {"means", means},       {"callbacks", callbacks}};
}
#else
;
#endif

// The snapshot from the manifest's "fit" object; the callbacks' tensors by
// tensor(name), which returns the named tensor's floats. Throws
// nlohmann::json::exception or std::invalid_argument on a malformed object.
TYPEFLOW_IO_INLINE fit_snapshot fit_snapshot_from_json(const nlohmann::json& j,
                                                       const std::function<std::vector<float>(const std::string&)>& tensor)
#if TYPEFLOW_IO_DEFINITIONS
{
  fit_snapshot s;
  s.epoch = io::whole_number<int>(j, "epoch");
  s.step = io::whole_number<std::int64_t>(j, "step");
  s.epoch_key = io::whole_number<std::uint64_t>(j, "epoch_key");
  if (s.epoch < 0 || s.step < 0) throw std::invalid_argument("a negative epoch or step in \"fit\"");
  for (const auto& [name, values] : j.at("history").items()) s.history[name] = detail::numbers_from_json(values);
  for (const auto& [name, values] : j.at("means").items()) s.means[name] = detail::numbers_from_json(values);
  for (const auto& [key, state] : j.at("callbacks").items()) {
    callback_state& c = s.callbacks[key];
    for (const auto& [name, v] : state.at("numbers").items()) c.numbers[name] = detail::number_from_json(v);
    for (const auto& name : state.at("tensors")) {
      const std::string n = name.get<std::string>();
      c.tensors[n] = tensor("callbacks." + key + "." + n);
    }
  }
  return s;
}
#else
;
#endif

}  // namespace typeflow

// What model::save_checkpoint writes beside the tensors, and what
// load_checkpoint checks before it changes anything: the manifest.
//
//   "model":     network type, policy, strategy, device, the parameter
//                region's floats: a checkpoint from another model, policy or
//                strategy is refused, naming what differs (except that a
//                checkpoint of or for a zero<k> model may cross strategies
//                and replica counts: strategies_interchangeable);
//   "optimizer": its name, slot count, the update count (iterations, which
//                the schedules and Adam's bias correction read) and
//                accumulate<K>'s micro-batches since its last update;
//   "training":  epochs begun (each epoch's shuffle key), the batch size
//                trained at (the next fit must use the same), the model's
//                seed and the dropout step counter;
//   "loss_scale": mixed_float16's state machine (scale, finite steps, skips);
//   "fit":       only in a checkpoint written during fit: where fit stood
//                (epoch, batch, the epoch's key), the epoch's running means,
//                the History so far and each callback's state (fit_snapshot.hpp).
// "optimizer" also holds "learning_rate" when the rate is a constant (a
// callback may have changed it), and "ema_in_weights" when use_ema's average
// was swapped into the weights (its slot then holds the raw weights). The tensors (io/checkpoint.hpp writes both)
// are "parameters" and "optimizer.slot.<s>", each the whole padded region, so
// that loading restores the arena's bytes exactly, and the callbacks' float
// arrays as "callbacks.<key>.<name>". A zero<k> model writes its slots as
// shards instead, each rank its own file (io/checkpoint_shards.hpp), and any
// model reads either: checkpoint_slots gives a loader the floats it holds.
// A zero<3> model shards its trainable weights too (format version 5): each
// shard file holds "parameters", its floats of the trainable region as their
// holder has them, and state.safetensors, instead of "parameters",
// "parameters.rest" (the region beyond the trainable floats: frozen weights,
// padding) and "parameters.statistics.<offset>" for each batch_norm
// statistic inside the trainable region, replica 0's (the holders'
// statistics differ, and a checkpoint keeps replica 0's, as an unsharded
// one does); checkpoint_slots::parameters and checkpoint_floats put the
// region together again.
// Format version 2 added "fit" and "learning_rate"; version 1 checkpoints
// are read as having neither.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "typeflow/distribute/mirrored.hpp"
#include "typeflow/distribute/single_device.hpp"
#include "typeflow/precision/loss_scale.hpp"
#include "typeflow/io/checkpoint.hpp"
#include "typeflow/io/json_fields.hpp"
#include "typeflow/io/safetensors.hpp"
#include "typeflow/train/engine.hpp"
#include "typeflow/train/fit_snapshot.hpp"
#include "typeflow/io/compiled.hpp"

namespace typeflow {

// save_checkpoint's options.
struct checkpoint_options {
  int keep = 3;  // the newest checkpoints kept in the directory
};

// What a checkpoint must match to be loaded.
struct checkpoint_identity {
  std::string network, policy, strategy, device;
  std::size_t parameter_floats = 0;
};

// The network as written, e.g. "sequential<input(12), dense<32>, relu, dense<4>>",
// with the input's dtype: what a checkpoint's weights were laid out for.
template <class Net>
std::string network_name() {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    std::string s = "sequential<" + std::string(Net::input_dtype::name) + " ";
    ((s += (I ? ", " : "") + Net::template layer_type_name<I>()), ...);
    return s + ">";
  }(std::make_index_sequence<Net::layer_count>{});
}

// "single_device", "mirrored<2>", "mirrored<2, sync_batch_norm_statistics>" or
// "multi_worker": each strategy names itself.
template <class Strategy>
std::string strategy_name() {
  return Strategy::name();
}

// Whether a checkpoint written under strategy `written` may load into a
// model under `loading`: the same strategy, or either a zero<k>: any model
// reads the slots whole or sharded (checkpoint_slots), whatever cut wrote
// them, so zero<1, mirrored<2>>'s loads into mirrored<2>,
// zero<2, mirrored<4>> or single_device, and theirs into it (N -> M). A run
// continued at another replica count splits its batches and draws its
// replicas' dropout streams otherwise, so it does not repeat the bits of
// the run that wrote the checkpoint; between two strategies that are
// neither zero<k> the refusal stays, which keeps a resume bit for bit.
inline bool strategies_interchangeable(const std::string& written, const std::string& loading) {
  const auto sharded = [](const std::string& name) { return name.rfind("zero<", 0) == 0; };
  return written == loading || sharded(written) || sharded(loading);
}

// The optimizer's and training's counters as the manifest holds them.
struct checkpoint_counters {
  std::string optimizer;
  int slots = 0;
  std::int64_t iterations = 0;
  int pending_micro_batches = 0;
  std::uint64_t epochs_begun = 0;
  int batch_size = 0;  // 0: never trained
  engine_counters engine{};
  std::optional<double> learning_rate{};  // the optimizer's, when constant
  bool ema_in_weights = false;            // use_ema: the average was swapped into the weights
  std::optional<fit_snapshot> fit{};      // written during fit: where it stood
};

TYPEFLOW_IO_INLINE nlohmann::ordered_json make_checkpoint_manifest(const checkpoint_identity& id, const checkpoint_counters& c)
#if TYPEFLOW_IO_DEFINITIONS
{
  const auto& ls = c.engine.loss_scale;
  nlohmann::ordered_json m = {
          {"format", "typeflow-checkpoint"},
          {"format_version", io::checkpoint_format_version},
          {"model",
           {{"network", id.network},
            {"policy", id.policy},
            {"strategy", id.strategy},
            {"device", id.device},
            {"parameter_floats", id.parameter_floats}}},
          {"optimizer",
           {{"name", c.optimizer},
            {"slots", c.slots},
            {"iterations", c.iterations},
            {"pending_micro_batches", c.pending_micro_batches}}},
          {"training",
           {{"epochs_begun", c.epochs_begun},
            {"batch_size", c.batch_size},
            {"seed", c.engine.seed},
            {"dropout_step", c.engine.dropout_step}}},
          {"loss_scale",
           {{"scale", ls.loss_scale},
            {"skipped", ls.skipped},
            {"skip_non_finite", ls.skip_non_finite},
            {"dynamic", ls.dynamic},
            {"growth_steps", ls.growth_steps},
            {"finite_steps", ls.finite_steps}}}};
  if (c.learning_rate) m["optimizer"]["learning_rate"] = *c.learning_rate;
  if (c.ema_in_weights) m["optimizer"]["ema_in_weights"] = true;
  if (c.fit) m["fit"] = fit_snapshot_json(*c.fit);
  return m;
}
#else
;
#endif

// A tensor of a checkpoint's state.safetensors as floats (its dtype and
// size checked before).
inline std::vector<float> checkpoint_floats(const io::safetensors_file& tensors, const std::string& name) {
  const auto bytes = tensors.data(name);
  std::vector<float> values(bytes.size() / sizeof(float));
  if (!values.empty())  // an empty one (zero<3>'s "parameters.rest" of an all-trainable region) has no data
    std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

// Checks the manifest against this model (identity, and the optimizer that
// compile() was given) and returns its counters; `tensors`, the checkpoint's
// state.safetensors, holds the callbacks' float arrays that "fit" names. Throws std::runtime_error
// naming the checkpoint and the first field that differs.
TYPEFLOW_IO_INLINE checkpoint_counters read_checkpoint_manifest(const nlohmann::json& m, const std::filesystem::path& where,
                                                                const checkpoint_identity& id, std::string_view optimizer,
                                                                int slots, const io::safetensors_file* tensors = nullptr)
#if TYPEFLOW_IO_DEFINITIONS
{
  const auto fail = [&](const std::string& what) {
    return std::runtime_error("load_checkpoint: \"" + where.string() + "\" " + what);
  };
  try {
    const auto& model = m.at("model");
    const auto differs = [&](const char* field, const std::string& theirs, const std::string& ours) {
      if (theirs != ours)
        throw fail("was written by a model with another " + std::string(field) + ": " + theirs + "; this model's is " +
                   ours);
    };
    differs("network", model.at("network").get<std::string>(), id.network);
    differs("policy", model.at("policy").get<std::string>(), id.policy);
    const std::string strategy = model.at("strategy").get<std::string>();
    if (!strategies_interchangeable(strategy, id.strategy)) differs("strategy", strategy, id.strategy);
    differs("parameter region size (floats)", std::to_string(io::whole_number<std::size_t>(model, "parameter_floats")),
            std::to_string(id.parameter_floats));
    const auto& o = m.at("optimizer");
    differs("optimizer", o.at("name").get<std::string>(), std::string(optimizer));
    differs("optimizer slot count", std::to_string(io::whole_number<int>(o, "slots")), std::to_string(slots));
    checkpoint_counters c;
    c.optimizer = o.at("name").get<std::string>();
    c.slots = io::whole_number<int>(o, "slots");
    c.iterations = io::whole_number<std::int64_t>(o, "iterations");
    c.pending_micro_batches = io::whole_number<int>(o, "pending_micro_batches");
    const auto& t = m.at("training");
    c.epochs_begun = io::whole_number<std::uint64_t>(t, "epochs_begun");
    c.batch_size = io::whole_number<int>(t, "batch_size");
    c.engine.seed = io::whole_number<std::uint64_t>(t, "seed");
    c.engine.dropout_step = io::whole_number<std::uint64_t>(t, "dropout_step");
    const auto& ls = m.at("loss_scale");
    c.engine.loss_scale.loss_scale = io::finite_float(ls, "scale");
    c.engine.loss_scale.skipped = io::whole_number<std::int64_t>(ls, "skipped");
    c.engine.loss_scale.skip_non_finite = io::whole_number<std::int32_t>(ls, "skip_non_finite");
    c.engine.loss_scale.dynamic = io::whole_number<std::int32_t>(ls, "dynamic");
    c.engine.loss_scale.growth_steps = io::whole_number<std::int32_t>(ls, "growth_steps");
    c.engine.loss_scale.finite_steps = io::whole_number<std::int32_t>(ls, "finite_steps");
    if (c.iterations < 0 || c.pending_micro_batches < 0 || c.batch_size < 0 || c.engine.loss_scale.skipped < 0)
      throw fail("has a negative counter in manifest.json");
    // Counters that training adds to: above these they would overflow (or,
    // in the schedules' doubles, stop counting) within any run's length.
    const auto at_most = [&](const char* field, auto value, std::uint64_t most) {
      if (static_cast<std::uint64_t>(value) > most)
        throw fail("has a manifest.json whose \"" + std::string(field) + "\" is out of range: " +
                   std::to_string(value) + " (at most " + std::to_string(most) + ")");
    };
    constexpr std::uint64_t exact_in_double = std::uint64_t{1} << 53;
    at_most("iterations", c.iterations, exact_in_double);
    at_most("epochs_begun", c.epochs_begun, exact_in_double);
    at_most("dropout_step", c.engine.dropout_step, std::uint64_t{1} << 62);
    at_most("skipped", c.engine.loss_scale.skipped, exact_in_double);
    const auto& state = c.engine.loss_scale;
    if (state.skip_non_finite != 0 && !(state.loss_scale > 0.f))
      throw fail("has a manifest.json whose loss \"scale\" is not positive: " + std::to_string(state.loss_scale));
    if (state.dynamic != 0 && (state.growth_steps < 1 || state.finite_steps < 0 || state.finite_steps > state.growth_steps))
      throw fail("has a manifest.json whose dynamic loss scale's \"growth_steps\" (" +
                 std::to_string(state.growth_steps) + ") or \"finite_steps\" (" + std::to_string(state.finite_steps) +
                 ") is out of range");
    if (o.contains("learning_rate")) {
      const double rate = o.at("learning_rate").get<double>();
      if (!(rate >= 0.0)) throw fail("has a negative learning rate in manifest.json");
      if (!(rate <= static_cast<double>(std::numeric_limits<float>::max())))
        throw fail("has a learning rate in manifest.json out of a float's range: " + o.at("learning_rate").dump());
      c.learning_rate = rate;
    }
    if (o.contains("ema_in_weights")) c.ema_in_weights = o.at("ema_in_weights").get<bool>();
    if (m.contains("fit")) {
      try {
        c.fit = fit_snapshot_from_json(m.at("fit"), [&](const std::string& name) {
          const io::tensor_spec* t = tensors ? tensors->find(name) : nullptr;
          if (!t || t->dtype != "F32")
            throw std::invalid_argument("its manifest names the tensor \"" + name +
                                        "\", which state.safetensors lacks or holds as another dtype than F32");
          return checkpoint_floats(*tensors, name);
        });
      } catch (const std::invalid_argument& e) {
        throw fail("has a malformed \"fit\" in manifest.json: " + std::string(e.what()));
      }
    }
    return c;
  } catch (const nlohmann::json::exception& e) {
    throw fail("has a manifest.json without a field this version needs, or with one of another type: " +
               std::string(e.what()));
  } catch (const std::invalid_argument& e) {  // io::whole_number, io::finite_float
    throw fail("has a manifest.json whose " + std::string(e.what()));
  }
}
#else
;
#endif

// The counters a checkpoint of this training state records (the manifest's
// "optimizer" and "training"), trained at batch_size, with the engine's.
template <class TrainingState>
checkpoint_counters counters_of(const TrainingState& training, int batch_size, const engine_counters& engine) {
  checkpoint_counters c;
  c.optimizer = std::string(training.optimizer->name());
  c.slots = training.slots;
  c.iterations = training.iterations;
  c.pending_micro_batches = training.optimizer->pending_micro_batches();
  c.epochs_begun = training.epoch_counter;
  c.batch_size = batch_size;
  c.engine = engine;
  c.learning_rate = training.optimizer->constant_learning_rate();
  c.ema_in_weights = training.ema_in_weights;
  return c;
}

// zero<3>'s names in state.safetensors (format version 5; the header comment).
inline constexpr const char* parameters_rest_name = "parameters.rest";
inline constexpr std::string_view statistic_tensor_prefix = "parameters.statistics.";
inline std::string statistic_tensor_name(std::size_t offset) {
  return std::string(statistic_tensor_prefix) + std::to_string(offset);
}
// A region's range: [offset, offset + size) in floats.
struct region_range {
  std::size_t offset = 0, size = 0;
};

// The tensors save_checkpoint writes: "parameters" (the whole region, padding
// included), or where the trainable weights go in the shard files (zero<3>:
// `statistics` then lists the batch_norm statistics inside the trainable
// region) "parameters.rest" and "parameters.statistics.<offset>" from
// `region`, which needs to hold only those floats; "optimizer.slot.<s>"
// (each slot's trainable part: frozen layers have none) and, written during
// fit, "callbacks.<key>.<name>". slot_values(s) gives slot s; the tensors
// point into what the arguments hold.
template <class Net, class SlotValues>
std::vector<io::tensor_to_write> checkpoint_tensors(std::span<const float> region, int slots, SlotValues&& slot_values,
                                                    const std::optional<fit_snapshot>& fit,
                                                    const std::optional<std::vector<region_range>>& statistics = {}) {
  std::vector<io::tensor_to_write> tensors;
  const std::int64_t trainable = static_cast<std::int64_t>(Net::trainable_floats);
  if (statistics) {  // the trainable weights are in the shard files
    const std::span<const float> rest = region.subspan(Net::trainable_floats);
    tensors.push_back({parameters_rest_name, "F32", {static_cast<std::int64_t>(rest.size())}, rest.data(),
                       rest.size_bytes()});
    for (const region_range& s : *statistics)
      tensors.push_back({statistic_tensor_name(s.offset), "F32", {static_cast<std::int64_t>(s.size)},
                         region.data() + s.offset, s.size * sizeof(float)});
  } else {
    tensors.push_back({"parameters", "F32", {static_cast<std::int64_t>(Net::parameter_floats)}, region.data(),
                       region.size_bytes()});
  }
  for (int s = 0; s < slots; ++s) {
    const std::span<const float> slot = slot_values(s);
    tensors.push_back({"optimizer.slot." + std::to_string(s), "F32", {trainable}, slot.data(), slot.size_bytes()});
  }
  if (fit)
    for (const auto& [key, state] : fit->callbacks)
      for (const auto& [name, values] : state.tensors)
        tensors.push_back({"callbacks." + key + "." + name, "F32", {static_cast<std::int64_t>(values.size())},
                           values.data(), values.size() * sizeof(float)});
  return tensors;
}

// "optimizer.slot.<s>".
inline std::string slot_tensor_name(int s) { return "optimizer.slot." + std::to_string(s); }

// Whether a checkpoint keeps its trainable weights in the shard files
// (written under zero<3>: state.safetensors holds "parameters.rest").
inline bool weights_in_shards(const io::checkpoint_read& read) {
  return read.shards && read.tensors.find(parameters_rest_name) && !read.tensors.find("parameters");
}

// A zero<3> checkpoint's whole parameter region: the shards' trainable
// floats (`shards` has read them all), each "parameters.statistics.<offset>"
// over them, then "parameters.rest". Throws std::runtime_error for a
// statistic named or placed outside the trainable region.
inline std::vector<float> sharded_parameters(const io::checkpoint_read& read,
                                             const io::checkpoint_shard_reader& shards) {
  const std::size_t trainable = shards.floats();
  std::vector<float> region(trainable);
  shards.copy("parameters", 0, trainable, region.data());
  for (const auto& t : read.tensors.tensors()) {
    if (!t.name.starts_with(statistic_tensor_prefix)) continue;
    const std::string_view digits = std::string_view(t.name).substr(statistic_tensor_prefix.size());
    std::size_t at = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), at);
    const auto bytes = read.tensors.data(t.name);
    if (error != std::errc{} || end != digits.data() + digits.size() || at > trainable ||
        bytes.size() / sizeof(float) > trainable - at)
      throw std::runtime_error("load_checkpoint: \"" + read.path.string() + "\" holds \"" + excerpt(t.name) +
                               "\", which does not name a place in the trainable region of " +
                               std::to_string(trainable) + " floats");
    if (!bytes.empty()) std::memcpy(region.data() + at, bytes.data(), bytes.size());
  }
  const std::vector<float> rest = checkpoint_floats(read.tensors, parameters_rest_name);
  region.insert(region.end(), rest.begin(), rest.end());
  return region;
}

// load_checkpoint's check of state.safetensors: every tensor
// checkpoint_tensors writes, of its size (the callbacks' as the file holds
// them: read_checkpoint_manifest checked their dtype), and nothing else;
// where the slots are sharded, a cut of the trainable region whose every
// file holds each slot, and under zero<3> the weights' shard too
// (`statistics`: this model's batch_norm statistics inside the trainable
// region, which such a checkpoint keeps beside; checkpoint_slots::need
// checks the files' data).
template <class Net>
void check_checkpoint_tensors(const io::checkpoint_read& read, int slots,
                              std::span<const region_range> statistics = {}) {
  const bool weights_sharded = weights_in_shards(read);
  std::vector<io::tensor_spec> expected;
  if (weights_sharded) {
    expected.push_back(
        {parameters_rest_name, "F32", {static_cast<std::int64_t>(Net::parameter_floats - Net::trainable_floats)}});
    for (const region_range& s : statistics)
      expected.push_back({statistic_tensor_name(s.offset), "F32", {static_cast<std::int64_t>(s.size)}});
  } else {
    expected.push_back({"parameters", "F32", {static_cast<std::int64_t>(Net::parameter_floats)}});
  }
  if (!read.shards)
    for (int s = 0; s < slots; ++s)
      expected.push_back({slot_tensor_name(s), "F32", {static_cast<std::int64_t>(Net::trainable_floats)}});
  for (const auto& t : read.tensors.tensors())
    if (t.name.rfind("callbacks.", 0) == 0) expected.push_back(t);
  io::check_tensors_match(read.tensors, expected);
  if (!read.shards) return;
  const auto fail = [&](const std::string& what) {
    return std::runtime_error("load_checkpoint: \"" + read.path.string() + "\" " + what);
  };
  if (read.shards->bounds.back() != Net::trainable_floats)
    throw fail("shards optimizer slots of " + std::to_string(read.shards->bounds.back()) +
               " floats; this model's trainable region holds " + std::to_string(Net::trainable_floats));
  const std::size_t tensors = static_cast<std::size_t>(slots) + (weights_sharded ? 1 : 0);
  for (const auto& file : read.shards->files) {
    bool each_slot = file.checksums.size() == tensors && (!weights_sharded || file.checksums.contains("parameters"));
    for (int s = 0; s < slots; ++s) each_slot = each_slot && file.checksums.contains(slot_tensor_name(s));
    if (!each_slot)
      throw fail("lists " + std::to_string(file.checksums.size()) + " tensors in \"" + file.name +
                 "\" where this optimizer has " + std::to_string(slots) + " slots (optimizer.slot.0 to " +
                 std::to_string(slots - 1) + ")" + (weights_sharded ? " and the weights' shard (parameters)" : ""));
  }
}

// A checkpoint's optimizer slots, whole in state.safetensors or sharded in
// files: need(begin, end) reads and checks whatever holds the trainable
// floats [begin, end) (under zero<k> a rank reads only the files of its
// shards), then copy(s, begin, end, into) cannot fail.
class checkpoint_slots {
 public:
  explicit checkpoint_slots(const io::checkpoint_read& read) : read_(&read) {
    if (read.shards) shards_.emplace(read.path, *read.shards);
  }
  void need(std::size_t begin, std::size_t end) {
    if (shards_) shards_->need(begin, end);
  }
  void copy(int s, std::size_t begin, std::size_t end, float* into) const {
    if (shards_) return shards_->copy(slot_tensor_name(s), begin, end, into);
    const auto bytes = read_->tensors.data(slot_tensor_name(s));
    std::memcpy(into, bytes.data() + begin * sizeof(float), (end - begin) * sizeof(float));
  }
  // The whole parameter region: state.safetensors's "parameters", or where
  // the trainable weights are in the shard files (zero<3>) those, which
  // need_parameters() reads and checks first, put together again.
  void need_parameters() {
    if (weights_in_shards(*read_)) shards_->need(0, shards_->floats());
  }
  std::vector<float> parameters() const {
    if (weights_in_shards(*read_)) return sharded_parameters(*read_, *shards_);
    return checkpoint_floats(read_->tensors, "parameters");
  }

 private:
  const io::checkpoint_read* read_;
  std::optional<io::checkpoint_shard_reader> shards_;
};

// A checkpoint's tensors by name, the sharded ones whole: "parameters",
// "optimizer.slot.<s>" and the callbacks' (for tools and tests that compare
// two checkpoints, whichever strategy wrote them; zero<3>'s "parameters" is
// put together from its shards, statistics and rest).
inline std::vector<std::string> checkpoint_tensor_names(const io::checkpoint_read& read) {
  std::vector<std::string> names;
  for (const auto& t : read.tensors.tensors())
    if (t.name != parameters_rest_name && !t.name.starts_with(statistic_tensor_prefix)) names.push_back(t.name);
  if (read.shards)
    for (const auto& [name, crc] : read.shards->files.front().checksums) names.push_back(name);
  return names;
}
inline std::vector<float> checkpoint_floats(const io::checkpoint_read& read, const std::string& name) {
  if (read.tensors.find(name) || !read.shards) return checkpoint_floats(read.tensors, name);
  io::checkpoint_shard_reader shards(read.path, *read.shards);
  std::vector<float> values(shards.floats());
  shards.need(0, values.size());
  if (name == "parameters" && weights_in_shards(read)) return sharded_parameters(read, shards);
  shards.copy(name, 0, values.size(), values.data());
  return values;
}

// What the model's optimizer must be able to take of a checkpoint: fewer
// accumulated micro-batches than it updates after, and a constant learning
// rate only where its rate is not a schedule.
// (A template, so that this header stays below the optimizers: the fuzz
// targets read checkpoints with clang 14, which cannot compile the layers.)
template <class Optimizer>
void check_checkpoint_optimizer(const checkpoint_counters& c, const Optimizer& optimizer,
                                const std::filesystem::path& path) {
  const auto refuse = [&](const std::string& why) {
    throw std::runtime_error("load_checkpoint: \"" + path.string() + "\" " + why);
  };
  const int per_update = optimizer.micro_batches_per_update();
  if (c.pending_micro_batches >= per_update)
    refuse("holds " + std::to_string(c.pending_micro_batches) + " accumulated micro-batches, but " +
           (per_update == 1 ? std::string("the optimizer does not accumulate")
                            : "the optimizer updates every " + std::to_string(per_update) + " (accumulate<" +
                                  std::to_string(per_update) + ">)"));
  if (c.learning_rate && !optimizer.constant_learning_rate())
    refuse("holds a constant learning rate, but this optimizer's learning rate is a schedule");
}

}  // namespace typeflow

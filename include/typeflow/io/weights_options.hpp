// Reading weights that another model wrote, and writing them for another
// reader: the options of model.load_weights(path, options) and
// model.save_weights(path, options), and the matching they run.
//
//   // a pretrained body into a model with a new head; the file's "body.*" are our "blocks.*"
//   model.load_weights("pretrained.safetensors",
//                      {.rename = [](std::string_view name) { return replace_prefix(name, "body.", "blocks."); },
//                       .allow_missing = true});
//   // Keras's skip_mismatch: tensors whose shape differs keep the model's values, with a warning
//   model.load_weights("other.safetensors", {.skip_mismatch = true});
//
// Matching, before anything is copied:
//
//   1. Each file tensor's name goes through options.rename (none: unchanged).
//      A rename to "" leaves that tensor out, e.g. buffers that are not
//      parameters. Two file tensors renamed to one model name are an error.
//   2. A model tensor with no file tensor is "missing": an error, unless
//      allow_missing, when it keeps its values (a new head).
//   3. A file tensor the model lacks is "unexpected": an error, unless
//      allow_unexpected (PyTorch's strict=False for both is these two).
//   4. A pair whose shapes differ is an error, unless skip_mismatch (Keras's
//      meaning), when the model tensor keeps its values and a warning names it.
//   5. F32 is copied; F16, BF16 and F64 are converted to float32 (F16 and BF16
//      exactly, F64 rounded to nearest); any other dtype is refused by name.
//
// An error is one std::runtime_error naming the file and listing, after
// renaming, the unmatched names on both sides (a renamed file tensor also
// by its name in the file) and the first shape that differs, with the
// option that would accept each kind.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "typeflow/core/half.hpp"
#include "typeflow/io/safetensors.hpp"

namespace typeflow::io {

// A renaming of tensor names: from one side's name to the other's; "" leaves
// the tensor out. An empty std::function keeps every name as it is.
using renaming = std::function<std::string(std::string_view)>;

// A table as a renaming: names in the table are renamed, the others kept.
inline renaming rename_table(std::map<std::string, std::string, std::less<>> table) {
  return [table = std::move(table)](std::string_view name) {
    const auto it = table.find(name);
    return it == table.end() ? std::string(name) : it->second;
  };
}

// A renaming that replaces a leading `from` with `to` and keeps other names.
inline renaming replace_prefix(std::string from, std::string to) {
  return [from = std::move(from), to = std::move(to)](std::string_view name) {
    return name.starts_with(from) ? to + std::string(name.substr(from.size())) : std::string(name);
  };
}

// How model.load_weights(path, options) matches a file's tensors to the model's.
struct load_weights_options {
  renaming rename = {};           // the file's name -> the model's; "" leaves the file tensor out
  bool skip_mismatch = false;     // a tensor whose shape differs keeps the model's values, with a warning
  bool allow_missing = false;     // model tensors absent from the file keep their values
  bool allow_unexpected = false;  // file tensors the model lacks are not read
  // Where skip_mismatch's warnings go; none: std::cerr, "warning: " first.
  std::function<void(const std::string&)> warn = {};
};

// What load_weights(path, options) did, by name.
struct load_weights_report {
  std::vector<std::string> loaded;      // model tensors read from the file, in the model's order
  std::vector<std::string> skipped;     // model tensors whose shape differs (skip_mismatch)
  std::vector<std::string> missing;     // model tensors absent from the file (allow_missing)
  std::vector<std::string> unexpected;  // file tensors (their names in the file) the model lacks
  std::vector<std::string> left_out;    // file tensors renamed to ""
};

// How model.save_weights(path, options) names what it writes.
struct save_weights_options {
  renaming rename = {};  // the model's name -> the file's; "" leaves the tensor out
  std::map<std::string, std::string> metadata = {{"format", "typeflow"}};  // the header's "__metadata__"
  // Each LoRA adapter folded into its kernel (W + Alpha / Rank · A · B) and
  // left out: the file a model of the same layers without lora<> reads.
  bool merge_lora = false;
};

// One tensor to copy: the file's tensor into the model's.
struct weights_copy {
  std::string file_name;
  std::string model_name;
};

// What to copy, decided before anything is copied, and what to report.
struct weights_load_plan {
  std::vector<weights_copy> copies;  // in the model's order
  load_weights_report report;
};

// The dtypes load_weights reads, converting to float32.
inline bool readable_as_float32(std::string_view dtype) {
  return dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "F64";
}

namespace detail {

// "a, b, c" for at most `shown` names, then "... and K more".
inline std::string name_list(const std::vector<std::string>& names, std::size_t shown = 20) {
  std::string out;
  for (std::size_t i = 0; i < std::min(shown, names.size()); ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > shown) out += ", ... and " + std::to_string(names.size() - shown) + " more";
  return out;
}

}  // namespace detail

// Matches file's tensors to the model's (model: parameter_specs(), all F32)
// under options, as the top of this header says. Throws std::runtime_error
// naming the file when they do not match; calls options.warn for each
// tensor skip_mismatch skips.
inline weights_load_plan plan_weights_load(const safetensors_file& file, std::span<const tensor_spec> model,
                                           const load_weights_options& options) {
  const std::string file_text = "\"" + file.path().string() + "\"";

  // The file's tensors under their model names, in the file's order.
  struct renamed {
    const tensor_spec* tensor;
    std::string model_name;
    bool used = false;
  };
  std::vector<renamed> file_tensors;
  std::map<std::string, std::size_t, std::less<>> by_model_name;  // -> position in file_tensors
  weights_load_plan plan;
  for (const tensor_spec& t : file.tensors()) {
    std::string name = options.rename ? options.rename(t.name) : t.name;
    if (name.empty()) {
      plan.report.left_out.push_back(t.name);
      continue;
    }
    if (auto [it, inserted] = by_model_name.emplace(name, file_tensors.size()); !inserted)
      throw std::runtime_error("cannot load weights from " + file_text + ": its tensors \"" +
                               file_tensors[it->second].tensor->name + "\" and \"" + t.name +
                               "\" are both renamed to \"" + name + "\"");
    file_tensors.push_back({&t, std::move(name)});
  }
  // "blocks.0.attn.qkv.kernel" or, when renamed, "blocks.0.attn.qkv.kernel (\"h.0.attn.c_attn.weight\" in the file)".
  const auto described = [](const std::string& model_name, const tensor_spec& t) {
    return t.name == model_name ? model_name : model_name + " (\"" + t.name + "\" in the file)";
  };

  std::vector<std::string> missing, mismatched_names;
  std::string first_mismatch;
  for (const tensor_spec& want : model) {
    const auto it = by_model_name.find(want.name);
    if (it == by_model_name.end()) {
      missing.push_back(want.name);
      continue;
    }
    file_tensors[it->second].used = true;
    const tensor_spec& have = *file_tensors[it->second].tensor;
    if (have.shape != want.shape) {
      if (first_mismatch.empty())
        first_mismatch = described(want.name, have) + " is " + shape_string(want.shape) + " in the model and " +
                         shape_string(have.shape) + " in the file";
      mismatched_names.push_back(want.name);
      continue;
    }
    if (!readable_as_float32(have.dtype))
      throw std::runtime_error("cannot load weights from " + file_text + ": tensor " + described(want.name, have) +
                               " has dtype " + have.dtype +
                               "; load_weights reads F32, and F16, BF16 and F64 converted to float32");
    plan.copies.push_back({have.name, want.name});
  }
  std::vector<std::string> unexpected, unexpected_described;
  for (const renamed& entry : file_tensors)
    if (!entry.used) {
      unexpected.push_back(entry.tensor->name);
      unexpected_described.push_back(entry.tensor->name == entry.model_name
                                         ? entry.model_name
                                         : "\"" + entry.tensor->name + "\" (renamed to " + entry.model_name + ")");
    }

  const bool missing_refused = !missing.empty() && !options.allow_missing;
  const bool unexpected_refused = !unexpected.empty() && !options.allow_unexpected;
  const bool mismatch_refused = !mismatched_names.empty() && !options.skip_mismatch;
  if (missing_refused || unexpected_refused || mismatch_refused) {
    std::string message = "cannot load weights from " + file_text + " into the model:";
    if (!missing.empty())
      message += "\n  in the model, not in the file (" + std::to_string(missing.size()) + "): " +
                 detail::name_list(missing) + (options.allow_missing ? "" : "  [allow_missing keeps their values]");
    if (!unexpected.empty())
      message += "\n  in the file, not in the model (" + std::to_string(unexpected.size()) + "): " +
                 detail::name_list(unexpected_described) +
                 (options.allow_unexpected ? "" : "  [allow_unexpected leaves them unread]");
    if (!mismatched_names.empty())
      message += "\n  shapes differ (" + std::to_string(mismatched_names.size()) + "), the first: " + first_mismatch +
                 (options.skip_mismatch ? "" : "  [skip_mismatch keeps the model's values]");
    if (!options.rename) message += "\n  (names are compared as they are; options.rename maps the file's to the model's)";
    throw std::runtime_error(message);
  }

  for (const std::string& name : mismatched_names) {
    const tensor_spec& have = *file_tensors[by_model_name.find(name)->second].tensor;
    const tensor_spec& want = *std::find_if(model.begin(), model.end(), [&](const tensor_spec& s) { return s.name == name; });
    const std::string warning = "load_weights: skipping " + described(name, have) + " from " + file_text + ": shape " +
                                shape_string(have.shape) + " in the file, " + shape_string(want.shape) +
                                " in the model (skip_mismatch); it keeps the model's values";
    if (options.warn)
      options.warn(warning);
    else
      std::cerr << "warning: " << warning << '\n';
  }
  for (const weights_copy& c : plan.copies) plan.report.loaded.push_back(c.model_name);
  plan.report.skipped = std::move(mismatched_names);
  plan.report.missing = std::move(missing);
  plan.report.unexpected = std::move(unexpected);
  return plan;
}

// The file's tensor `name` as float32 values, row-major: F32 as stored, F16
// and BF16 widened exactly, F64 rounded to nearest. Throws
// std::runtime_error naming the file and the tensor for any other dtype.
inline std::vector<float> read_float32(const safetensors_file& file, std::string_view name) {
  const tensor_spec* spec = file.find(name);
  if (spec == nullptr)
    throw std::out_of_range("safetensors file \"" + file.path().string() + "\" has no tensor named \"" +
                            std::string(name) + "\"");
  const std::span<const std::byte> bytes = file.data(name);
  const std::size_t element_bytes = dtype_size(spec->dtype);
  std::vector<float> values(bytes.size() / element_bytes);
  // Copied out element by element: the file only guarantees byte alignment.
  const auto each = [&]<class Stored>(auto widen) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      Stored stored;
      std::memcpy(&stored, bytes.data() + i * sizeof(Stored), sizeof(Stored));
      values[i] = widen(stored);
    }
  };
  if (spec->dtype == "F32")
    each.template operator()<float>([](float x) { return x; });
  else if (spec->dtype == "F64")
    each.template operator()<double>([](double x) { return static_cast<float>(x); });
  else if (spec->dtype == "F16")
    each.template operator()<std::uint16_t>([](std::uint16_t h) { return static_cast<float>(f16::from_bits(h)); });
  else if (spec->dtype == "BF16")
    each.template operator()<std::uint16_t>([](std::uint16_t b) { return static_cast<float>(bf16::from_bits(b)); });
  else
    throw std::runtime_error("safetensors file \"" + file.path().string() + "\": tensor \"" + std::string(name) +
                             "\" has dtype " + spec->dtype + ", which cannot be read as float32 (F32, F16, BF16, F64 can)");
  return values;
}

}  // namespace typeflow::io

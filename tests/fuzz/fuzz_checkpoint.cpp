// Fuzz target: a checkpoint directory as model::load_checkpoint reads it,
// io::read_checkpoint (include/typeflow/io/checkpoint.hpp) and then
// read_checkpoint_manifest (include/typeflow/train/checkpointing.hpp).
//
// The input is two files (fuzz_support.hpp's split_two): manifest.json, then
// state.safetensors, written into one checkpoint's directory. Every refusal
// is a std::runtime_error that names the directory; an accepted manifest
// gives counters that are not negative.
#include <optional>
#include <string>
#include <string_view>

#include <typeflow/io/checkpoint.hpp>

#include "fuzz_checkpoint.hpp"
#include "fuzz_support.hpp"

namespace io = typeflow::io;
namespace fz = typeflow::fuzz;

namespace {

// Known defects, found by this target and reported, whose fixes belong to
// files under change for another issue (io/checkpoint.hpp's read_checkpoint,
// train/checkpointing.hpp's read_checkpoint_manifest). Their inputs are in
// tests/fuzz/known_defects/fuzz_checkpoint/. Inputs that would hit them are
// skipped, so that the rest of the reader is still fuzzed; once fixed, move
// the inputs to tests/fuzz/regressions/fuzz_checkpoint/ and delete this.
//   1. read_checkpoint reads "format" and "format_version" with nlohmann's
//      value(): another JSON type throws json::type_error, not the
//      documented runtime_error, and a float version such as 1e300 is
//      converted to int, which is undefined behaviour.
//   2. read_checkpoint_manifest converts its numbers with get<int>(),
//      get<std::size_t>() and so on: a float such as 1e300 (or -1.5 for an
//      unsigned field) is converted out of range, undefined behaviour, and a
//      fraction such as 2.5 is truncated and accepted.
bool hits_known_read_defect(const nlohmann::json& manifest) {
  if (!manifest.is_object()) return false;
  const auto format = manifest.find("format"), version = manifest.find("format_version");
  return (format != manifest.end() && !format->is_string()) ||
         (version != manifest.end() && !version->is_number_integer());
}
bool hits_known_manifest_defect(const nlohmann::json& manifest) {
  for (const char* section : {"model", "optimizer", "training", "loss_scale"}) {
    const auto found = manifest.find(section);
    if (found == manifest.end() || !found->is_object()) continue;
    for (const auto& [key, value] : found->items())
      if (value.is_number_float() && !(std::string_view(section) == "loss_scale" && key == "scale")) return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto [manifest, state] = fz::split_two(data, size);
  const auto dir = fz::scratch_dir() / "ckpt" / "ckpt-000000000007";
  fz::write_scratch("ckpt/ckpt-000000000007/manifest.json", manifest);
  fz::write_scratch("ckpt/ckpt-000000000007/state.safetensors", state);

  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(manifest);
  } catch (const nlohmann::json::exception&) {
  }
  if (hits_known_read_defect(parsed)) return 0;

  // Through the parent directory, as load_checkpoint("ckpt") finds the newest.
  std::optional<io::checkpoint_read> read;
  if (!fz::refused_or_read(dir, [&] { read.emplace(io::read_checkpoint(dir.parent_path())); })) return 0;
  fz::require(read->path == dir, "read_checkpoint read " + read->path.string() + ", not the only checkpoint");

  if (hits_known_manifest_defect(read->manifest)) return 0;
  typeflow::checkpoint_counters counters;
  if (!fz::refused_or_read(dir, [&] {
        counters = typeflow::read_checkpoint_manifest(read->manifest, read->path, fz::checkpoint_fuzz_identity,
                                                            fz::checkpoint_fuzz_optimizer, fz::checkpoint_fuzz_slots);
      }))
    return 0;
  fz::require(counters.iterations >= 0 && counters.pending_micro_batches >= 0 && counters.batch_size >= 0,
              "read_checkpoint_manifest accepted a negative counter");
  fz::require(counters.slots == fz::checkpoint_fuzz_slots && counters.optimizer == fz::checkpoint_fuzz_optimizer,
              "read_checkpoint_manifest accepted another optimizer");
  return 0;
}

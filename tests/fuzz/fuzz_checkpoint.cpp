// Fuzz target: a checkpoint directory as model::load_checkpoint reads it,
// io::read_checkpoint (include/typeflow/io/checkpoint.hpp) and then
// read_checkpoint_manifest (include/typeflow/train/checkpointing.hpp), and
// a sharded checkpoint's layout ("shards", io/checkpoint_shards.hpp).
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


extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto [manifest, state] = fz::split_two(data, size);
  const auto dir = fz::scratch_dir() / "ckpt" / "ckpt-000000000007";
  fz::write_scratch("ckpt/ckpt-000000000007/manifest.json", manifest);
  fz::write_scratch("ckpt/ckpt-000000000007/state.safetensors", state);

  // Through the parent directory, as load_checkpoint("ckpt") finds the newest.
  std::optional<io::checkpoint_read> read;
  if (!fz::refused_or_read(dir, [&] { read.emplace(io::read_checkpoint(dir.parent_path())); })) return 0;
  fz::require(read->path == dir, "read_checkpoint read " + read->path.string() + ", not the only checkpoint");
  // A sharded one's slot files (none here: every layout that parsed is refused for the missing file).
  if (read->shards &&
      fz::refused_or_read(dir, [&] { io::checkpoint_shard_reader(read->path, *read->shards).need(0, read->shards->bounds.back()); }))
    fz::require(read->shards->bounds.back() == 0, "a shard layout over floats was read without its files");

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

// A zero<k> model's optimizer slots in a checkpoint: one file per shard,
// written by the rank that holds the shard, so that no rank gathers a whole
// slot to save or load it (io/checkpoint.hpp writes the directory):
//
//   <ckpt>/slots-00001-of-00004.safetensors   shard 0 of 4: "optimizer.slot.<s>",
//                                             floats [begin, end) of slot s, shape (end - begin)
//                                             (zero<3>: and "parameters", those of the
//                                             trainable weights; train/checkpointing.hpp)
//
// The file names count from 1, as Hugging Face's sharded weights do. Each
// file's metadata says where it belongs ("shard", "shards", "begin", "end")
// and each tensor's CRC-32C ("crc32c.<tensor>"); manifest.json's "shards"
// (format version 4) is the layout the loader trusts:
//
//   "shards": {"count": 4, "bounds": [0, 112, 224, 336, 416],
//              "files": [{"name": "slots-00001-of-00004.safetensors",
//                         "checksums": {"optimizer.slot.0": "1a2b3c4d", ...}}, ...]}
//
// Across processes (zero<k, multi_worker>) each worker stages its file beside
// the checkpoints, as "<dir>/.ckpt-<n>.part.<file name>", and the chief moves
// the staged files into the checkpoint's temporary directory before it
// appears under its name (read_staged_shard gives the chief their
// checksums); the next save's tidying removes what a failed save staged.
// A loader reads only the files that hold the floats it needs
// (checkpoint_shard_reader), each whole and checked against the manifest.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "typeflow/core/excerpt.hpp"
#include "typeflow/io/crc32c.hpp"
#include "typeflow/io/durable_files.hpp"
#include "typeflow/io/safetensors.hpp"
#include "typeflow/io/compiled.hpp"

namespace typeflow::io {

// One shard's tensors, to write: each F32 of shape (end - begin).
struct checkpoint_shard {
  int index = 0;
  std::uint64_t begin = 0, end = 0;
  std::vector<tensor_to_write> tensors;
};

// A zero<k> model's slots as write_checkpoint takes them: the cut (count + 1
// bounds), the shards this process writes into the checkpoint, and whether
// every other shard was staged in the directory by its worker.
struct checkpoint_shards_to_write {
  std::vector<std::uint64_t> bounds;
  std::vector<checkpoint_shard> here;
  bool others_staged = false;
};

// The manifest's "shards": the cut (count + 1 bounds from 0) and each file.
struct checkpoint_shard_layout {
  struct file {
    std::string name;
    std::map<std::string, std::string> checksums;  // tensor -> CRC-32C, "%08x"
  };
  std::vector<std::uint64_t> bounds;
  std::vector<file> files;
  int count() const { return static_cast<int>(files.size()); }
};

// "slots-00001-of-00004.safetensors" for shard 0 of 4.
inline std::string checkpoint_shard_name(int index, int count) {
  char name[64];
  std::snprintf(name, sizeof name, "slots-%05d-of-%05d.safetensors", index + 1, count);
  return name;
}

// Where a worker stages its shard of checkpoint `number` in dir.
inline std::filesystem::path staged_shard_path(const std::filesystem::path& dir, const std::string& checkpoint_name,
                                               int index, int count) {
  return dir / ("." + checkpoint_name + ".part." + checkpoint_shard_name(index, count));
}

// Writes shard `shard` of `count` to path (atomically, fsync'ed) with its
// place and checksums in the metadata; returns its entry of the layout.
TYPEFLOW_IO_INLINE checkpoint_shard_layout::file write_checkpoint_shard(const std::filesystem::path& path,
                                                                       const checkpoint_shard& shard, int count)
#if TYPEFLOW_IO_DEFINITIONS
{
  checkpoint_shard_layout::file entry{checkpoint_shard_name(shard.index, count), {}};
  std::map<std::string, std::string> metadata{{"format", "typeflow-checkpoint-shard"},
                                              {"shard", std::to_string(shard.index)},
                                              {"shards", std::to_string(count)},
                                              {"begin", std::to_string(shard.begin)},
                                              {"end", std::to_string(shard.end)}};
  for (const tensor_to_write& t : shard.tensors) {
    const std::string crc = crc32c_text(std::span(static_cast<const std::byte*>(t.data), t.bytes));
    entry.checksums[t.name] = crc;
    metadata["crc32c." + t.name] = crc;
  }
  write_safetensors(path, shard.tensors, metadata);
  return entry;
}
#else
;
#endif

namespace detail {

// A shard file's metadata: only its header is read (a staged file's
// checksums, for the chief's manifest).
TYPEFLOW_IO_INLINE std::map<std::string, std::string> read_shard_metadata(const std::filesystem::path& path)
#if TYPEFLOW_IO_DEFINITIONS
{
  const auto fail = [&](const std::string& what) {
    return std::runtime_error("cannot write checkpoint: the staged shard \"" + path.string() + "\" " + what);
  };
  fd_guard file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) throw fail("cannot be opened: " + errno_text(errno));
  unsigned char prefix[8];
  if (::pread(file.get(), prefix, sizeof prefix, 0) != static_cast<ssize_t>(sizeof prefix))
    throw fail("is shorter than a safetensors header");
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = length << 8 | prefix[i];
  if (length > (std::uint64_t{1} << 24)) throw fail("has a header of " + std::to_string(length) + " bytes");
  std::string header(length, '\0');
  if (::pread(file.get(), header.data(), length, 8) != static_cast<ssize_t>(length)) throw fail("is truncated");
  std::map<std::string, std::string> metadata;
  try {
    const nlohmann::json parsed = nlohmann::json::parse(header);
    for (const auto& [key, value] : parsed.at("__metadata__").items()) metadata[key] = value.get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw fail("has a header this version cannot read: " + std::string(e.what()));
  }
  return metadata;
}
#else
;
#endif

}  // namespace detail

// The entry of the layout for a shard that a worker staged at path: its
// metadata must give the place the chief expects.
TYPEFLOW_IO_INLINE checkpoint_shard_layout::file read_staged_shard(const std::filesystem::path& path, int index,
                                                                  int count, std::uint64_t begin, std::uint64_t end)
#if TYPEFLOW_IO_DEFINITIONS
{
  const std::map<std::string, std::string> metadata = detail::read_shard_metadata(path);
  const auto field = [&](const char* key) {
    const auto it = metadata.find(key);
    return it == metadata.end() ? std::string("(none)") : it->second;
  };
  if (field("shard") != std::to_string(index) || field("shards") != std::to_string(count) ||
      field("begin") != std::to_string(begin) || field("end") != std::to_string(end))
    throw std::runtime_error("cannot write checkpoint: the staged shard \"" + path.string() + "\" holds shard " +
                             field("shard") + " of " + field("shards") + ", floats [" + field("begin") + ", " +
                             field("end") + "); expected shard " + std::to_string(index) + " of " +
                             std::to_string(count) + ", [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
  checkpoint_shard_layout::file entry{checkpoint_shard_name(index, count), {}};
  for (const auto& [key, value] : metadata)
    if (key.rfind("crc32c.", 0) == 0) entry.checksums[key.substr(7)] = value;
  return entry;
}
#else
;
#endif

// The manifest's "shards" for a layout, and back. parse_shard_layout throws
// std::runtime_error naming the manifest and what is wrong: bounds that do
// not start at 0, go down or end elsewhere than `floats`; a count that is
// not the files'; a file named otherwise than its place says; checksums
// that are not strings.
inline nlohmann::ordered_json shard_layout_json(const checkpoint_shard_layout& layout) {
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const auto& f : layout.files) {
    nlohmann::ordered_json sums = nlohmann::ordered_json::object();
    for (const auto& [name, crc] : f.checksums) sums[name] = crc;
    files.push_back({{"name", f.name}, {"checksums", std::move(sums)}});
  }
  return {{"count", layout.count()}, {"bounds", layout.bounds}, {"files", std::move(files)}};
}

TYPEFLOW_IO_INLINE checkpoint_shard_layout parse_shard_layout(const nlohmann::json& shards,
                                                              const std::filesystem::path& manifest_path)
#if TYPEFLOW_IO_DEFINITIONS
{
  const auto fail = [&](const std::string& what) {
    return std::runtime_error("load_checkpoint: \"" + manifest_path.string() + "\": \"shards\" " + what);
  };
  if (!shards.is_object()) throw fail("is not an object");
  const auto count = shards.find("count"), bounds = shards.find("bounds"), files = shards.find("files");
  if (count == shards.end() || !count->is_number_unsigned() || count->get<std::uint64_t>() < 1 ||
      count->get<std::uint64_t>() > 65536)
    throw fail("has no \"count\" from 1 to 65536");
  const int n = count->get<int>();
  if (bounds == shards.end() || !bounds->is_array() || bounds->size() != static_cast<std::size_t>(n) + 1)
    throw fail("has no \"bounds\" array of count + 1 = " + std::to_string(n + 1) + " numbers");
  if (files == shards.end() || !files->is_array() || files->size() != static_cast<std::size_t>(n))
    throw fail("has no \"files\" array of count = " + std::to_string(n) + " entries");
  checkpoint_shard_layout layout;
  for (const auto& b : *bounds) {
    if (!b.is_number_unsigned()) throw fail("has a bound that is not a non-negative whole number: " + excerpt(b.dump()));
    const std::uint64_t at = b.get<std::uint64_t>();
    if (layout.bounds.empty() ? at != 0 : at < layout.bounds.back())
      throw fail("has bounds that do not start at 0 and rise: " + excerpt(bounds->dump()));
    layout.bounds.push_back(at);
  }
  for (int i = 0; i < n; ++i) {
    const auto& f = (*files)[static_cast<std::size_t>(i)];
    const std::string expected = checkpoint_shard_name(i, n);
    const auto name = f.is_object() ? f.find("name") : f.end();
    if (!f.is_object() || name == f.end() || !name->is_string() || name->get<std::string>() != expected)
      throw fail("names file " + std::to_string(i) + " otherwise than \"" + expected + "\"");
    const auto sums = f.find("checksums");
    if (sums == f.end() || !sums->is_object()) throw fail("gives no \"checksums\" object for \"" + expected + "\"");
    checkpoint_shard_layout::file entry{expected, {}};
    for (const auto& [tensor, crc] : sums->items()) {
      if (!crc.is_string()) throw fail("has a checksum that is not a string in \"" + expected + "\"");
      entry.checksums[tensor] = crc.get<std::string>();
    }
    layout.files.push_back(std::move(entry));
  }
  return layout;
}
#else
;
#endif

// Reads the floats [begin, end) of a checkpoint's sharded tensors from the
// files that hold them. need() reads and checks every such file (its
// metadata against the layout, its tensors against the manifest's names,
// sizes and CRC-32C) so that a loader can check everything before it
// changes anything; copy() then cannot fail.
class checkpoint_shard_reader {
 public:
  checkpoint_shard_reader(std::filesystem::path checkpoint, checkpoint_shard_layout layout)
      : where_(std::move(checkpoint)), layout_(std::move(layout)) {}

  const checkpoint_shard_layout& layout() const noexcept { return layout_; }
  std::uint64_t floats() const noexcept { return layout_.bounds.back(); }

  void need(std::uint64_t begin, std::uint64_t end) {
    check_range(begin, end);
    for (int i = 0; i < layout_.count(); ++i)
      if (overlaps(i, begin, end) && !files_.contains(i)) files_.emplace(i, read_shard(i));
  }

  // The floats [begin, end) of tensor `name`, after need() covered them.
  void copy(std::string_view name, std::uint64_t begin, std::uint64_t end, float* into) const {
    check_range(begin, end);
    for (int i = 0; i < layout_.count(); ++i) {
      if (!overlaps(i, begin, end)) continue;
      const auto file = files_.find(i);
      if (file == files_.end()) throw std::logic_error("checkpoint_shard_reader::copy: need() did not read shard " + std::to_string(i));
      const std::uint64_t from = std::max(begin, bound(i)), to = std::min(end, bound(i + 1));
      const auto bytes = file->second.data(name);
      std::memcpy(into + (from - begin), bytes.data() + (from - bound(i)) * sizeof(float), (to - from) * sizeof(float));
    }
  }

 private:
  std::uint64_t bound(int i) const { return layout_.bounds[static_cast<std::size_t>(i)]; }
  bool overlaps(int i, std::uint64_t begin, std::uint64_t end) const { return bound(i) < end && begin < bound(i + 1); }
  void check_range(std::uint64_t begin, std::uint64_t end) const {
    if (begin > end || end > floats())
      throw std::out_of_range("checkpoint_shard_reader: floats [" + std::to_string(begin) + ", " + std::to_string(end) +
                              ") of a region of " + std::to_string(floats()));
  }
  safetensors_file read_shard(int i) const;

  std::filesystem::path where_;
  checkpoint_shard_layout layout_;
  std::map<int, safetensors_file> files_;
};

#if TYPEFLOW_IO_DEFINITIONS
TYPEFLOW_IO_INLINE safetensors_file checkpoint_shard_reader::read_shard(int i) const {
  const auto& entry = layout_.files[static_cast<std::size_t>(i)];
  const std::filesystem::path path = where_ / entry.name;
  const auto fail = [&](const std::string& what) {
    return std::runtime_error("load_checkpoint: \"" + path.string() + "\" " + what);
  };
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw fail("is missing: manifest.json lists it as shard " + std::to_string(i) + " of " +
               std::to_string(layout_.count()) + " of the optimizer's slots");
  safetensors_file file = safetensors_file::read(path);
  const auto& metadata = file.metadata();
  const auto field = [&](const char* key) {
    const auto it = metadata.find(key);
    return it == metadata.end() ? std::string("(none)") : excerpt(it->second);
  };
  if (field("shard") != std::to_string(i) || field("shards") != std::to_string(layout_.count()) ||
      field("begin") != std::to_string(bound(i)) || field("end") != std::to_string(bound(i + 1)))
    throw fail("holds shard " + field("shard") + " of " + field("shards") + ", floats [" + field("begin") + ", " +
               field("end") + "); manifest.json places it as shard " + std::to_string(i) + " of " +
               std::to_string(layout_.count()) + ", [" + std::to_string(bound(i)) + ", " +
               std::to_string(bound(i + 1)) + ")");
  std::vector<tensor_spec> expected;
  for (const auto& [name, crc] : entry.checksums)
    expected.push_back({name, "F32", {static_cast<std::int64_t>(bound(i + 1) - bound(i))}});
  check_tensors_match(file, expected);
  for (const auto& [name, crc] : entry.checksums) {
    const std::string computed = crc32c_text(file.data(name));
    if (crc != computed)
      throw fail("is corrupt: the data of \"" + excerpt(name) + "\" gives CRC-32C " + computed +
                 "; manifest.json recorded " + excerpt(crc));
  }
  return file;
}
#endif

}  // namespace typeflow::io

// Checkpoint directories: what model::save_checkpoint writes, atomically.
//
//   <dir>/ckpt-000000001200/state.safetensors   the tensors (weights, optimizer slots)
//   <dir>/ckpt-000000001200/manifest.json       the rest: format version, what model it
//                                               is for, counters, the loss-scale state,
//                                               and each tensor's CRC-32C
//   <dir>/ckpt-000000001200/slots-00001-of-00004.safetensors
//                                               a zero<k> model's optimizer slots, a file
//                                               per shard (io/checkpoint_shards.hpp)
//
// The number is the update count (the model's iterations) when it was
// written. A checkpoint is complete when both files are there; it only ever
// appears under its final name complete, and leaves it whole:
//   - written into a temporary directory beside the others
//     ("<dir>/.ckpt-<n>.tmp-<pid>-<k>"), each file fsync'ed, the directory
//     fsync'ed, then renamed to its final name and <dir> fsync'ed;
//   - one of the same number (mixed_float16's skipped steps repeat numbers)
//     is replaced by exchanging the two directories in one rename
//     (renameat2's RENAME_EXCHANGE), so that a reader sees the old or the
//     new, never neither; where the file system cannot exchange, the old one
//     is moved aside first (".ckpt-<n>.old-<pid>-<k>"), and readers take it
//     while the new one is not in place;
//   - removed (pruned, or deleted by backup_and_restore) by renaming it to
//     ".ckpt-<n>.dead-<pid>-<k>" first, then removing that.
// A crash at any moment leaves every complete checkpoint loadable and at
// worst hidden directories, which the next write clears once the process
// that made them is gone (a checkpoint moved aside by a dead writer is put
// back). A save is refused when the directory already holds a newer
// checkpoint: the loaders would take that one, and pruning would remove the
// new one at once. Reading takes the newest complete one and checks each
// tensor against the CRC-32C its manifest recorded.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "typeflow/core/excerpt.hpp"
#include "typeflow/io/checkpoint_shards.hpp"
#include "typeflow/io/crc32c.hpp"
#include "typeflow/io/durable_files.hpp"
#include "typeflow/io/safetensors.hpp"
#include "typeflow/io/compiled.hpp"

namespace typeflow::io {

// 2: "fit" and the optimizer's "learning_rate" (train/checkpointing.hpp);
// 3: "checksums", each tensor's CRC-32C; 4: "shards", a zero<k> model's
// slots in a file per shard; 5: under zero<3> the trainable weights in the
// shard files too (train/checkpointing.hpp's "parameters.rest"). Versions 1
// to 4 are read too.
inline constexpr int checkpoint_format_version = 5;
inline constexpr int oldest_checkpoint_format_version = 1;

namespace detail {

inline std::string checkpoint_name(std::int64_t number) {
  char name[32];
  std::snprintf(name, sizeof name, "ckpt-%012lld", static_cast<long long>(number));
  return name;
}

// The number of "ckpt-<n>", or nothing for another name.
inline std::optional<std::int64_t> checkpoint_number(const std::string& name) {
  if (name.size() != 17 || name.rfind("ckpt-", 0) != 0) return std::nullopt;
  std::int64_t n = 0;
  for (std::size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

inline void fsync_path(const std::filesystem::path& path, int flags, const std::string& what) {
  fd_guard fd(::open(path.c_str(), flags | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0)
    throw std::runtime_error("cannot write checkpoint: fsync of " + what + " \"" + path.string() +
                             "\" failed: " + errno_text(errno));
}

// The hidden names beside the checkpoints: ".ckpt-<n>.<kind>-<pid>..." for
// kind "tmp" (being written, or replaced by an exchange), "old" (moved aside
// to be replaced) and "dead" (being removed). Returns where the pid starts,
// or 0 when name is not one of them.
inline std::size_t hidden_pid_at(const std::string& name, std::string_view kind) {
  if (name.rfind(".ckpt-", 0) != 0) return 0;
  const std::string marker = "." + std::string(kind) + "-";
  const auto at = name.find(marker, 6);
  return at == std::string::npos ? 0 : at + marker.size();
}

// The number of ".ckpt-<n>.<kind>-...", or nothing.
inline std::optional<std::int64_t> hidden_number(const std::string& name) {
  const auto dot = name.find('.', 1);
  if (name.rfind(".ckpt-", 0) != 0 || dot == std::string::npos) return std::nullopt;
  return checkpoint_number(name.substr(1, dot - 1));
}

inline std::atomic<unsigned>& checkpoint_serial() {
  static std::atomic<unsigned> serial{0};  // two saves of one process never share a hidden name
  return serial;
}
inline std::string hidden_name(const std::string& name, std::string_view kind) {
  return "." + name + "." + std::string(kind) + "-" + std::to_string(::getpid()) + "-" + std::to_string(checkpoint_serial()++);
}

inline bool complete_checkpoint(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path / "manifest.json", ec) &&
         std::filesystem::is_regular_file(path / "state.safetensors", ec);
}

// The number of a checkpoint's directory, under its own name or a hidden one.
inline std::optional<std::int64_t> number_of(const std::filesystem::path& checkpoint) {
  const std::string name = checkpoint.filename().string();
  if (const auto n = checkpoint_number(name)) return n;
  return hidden_number(name);
}

// Takes a checkpoint out of its name first (so that no reader ever sees it
// half-removed), then removes it. Gone already (another process retired
// it): nothing to do.
inline void retire_checkpoint(const std::filesystem::path& checkpoint) {
  std::error_code ec;
  const auto n = number_of(checkpoint);
  const std::filesystem::path hidden =
      checkpoint.parent_path() / hidden_name(n ? checkpoint_name(*n) : std::string("ckpt"), "dead");
  std::filesystem::rename(checkpoint, hidden, ec);
  if (!ec) std::filesystem::remove_all(hidden, ec);
}

// Puts dir in order before a write: removes what dead writers left (their
// temporaries and retired checkpoints), puts back a checkpoint that a dead
// writer moved aside to replace it when nothing took its place, and retires
// a ckpt-<n> that holds only some of a checkpoint's two files (what an
// earlier typeflow's removal, which deleted the state before the manifest,
// could leave), and removes the shards that workers staged for a save that
// did not finish (except checkpoint `staging`'s, being saved now). A
// directory with anything else in it is not ours to touch.
inline void tidy_checkpoints(const std::filesystem::path& dir, std::optional<std::int64_t> staging = std::nullopt) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const auto number = hidden_number(name);
    if (number && number != staging && name.find(".part.", 6) != std::string::npos) {
      std::error_code ignored;
      std::filesystem::remove(entry.path(), ignored);
    }
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::size_t at = hidden_pid_at(name, "old");
    const auto number = hidden_number(name);
    if (at == 0 || !number) continue;
    const long pid = std::strtol(name.c_str() + at, nullptr, 10);
    if (pid == ::getpid() || !process_gone(pid)) continue;
    std::error_code ignored;
    const std::filesystem::path final_path = dir / checkpoint_name(*number);
    if (complete_checkpoint(entry.path()) && !std::filesystem::exists(final_path, ignored))
      std::filesystem::rename(entry.path(), final_path, ignored);
    else
      retire_checkpoint(entry.path());
  }
  for (const char* kind : {"tmp", "dead"})
    remove_abandoned(dir, [&](const std::string& name) { return hidden_pid_at(name, kind); });
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (!checkpoint_number(entry.path().filename().string()) || complete_checkpoint(entry.path())) continue;
    bool only_ours = true;
    std::error_code inner;
    for (const auto& file : std::filesystem::directory_iterator(entry.path(), inner)) {
      const auto f = file.path().filename();
      only_ours = only_ours && (f == "manifest.json" || f == "state.safetensors" ||
                                f.string().rfind("slots-", 0) == 0);
    }
    if (only_ours && !inner) retire_checkpoint(entry.path());
  }
}

// Puts the complete directory `temp` at `final_path`. Where a checkpoint is
// there already, exchanges the two in one rename and returns where the old
// one now is (temp's name), for the caller to retire; where the file system
// cannot exchange, moves the old one aside first.
inline std::optional<std::filesystem::path> place_checkpoint(const std::filesystem::path& temp,
                                                             const std::filesystem::path& final_path) {
  const auto failed = [&](const char* what, int error) {
    return std::runtime_error("cannot write checkpoint: " + std::string(what) + " \"" + temp.string() + "\" to \"" +
                              final_path.string() + "\" failed: " + errno_text(error));
  };
  // Another process may place or retire the same number meanwhile: each
  // step that finds the other state again is retried.
  for (int attempt = 0; attempt < 16; ++attempt) {
    if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, final_path.c_str(), RENAME_NOREPLACE) == 0) return std::nullopt;
    if (errno == EINVAL || errno == ENOSYS) break;  // no renameat2 flags here: the fallback below
    if (errno != EEXIST && errno != ENOTEMPTY) throw failed("renaming", errno);
    if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, final_path.c_str(), RENAME_EXCHANGE) == 0) return temp;
    if (errno == EINVAL || errno == ENOSYS) break;
    if (errno != ENOENT) throw failed("exchanging", errno);
  }
  // Without RENAME_EXCHANGE: the old one aside (readers take it meanwhile), then the new one in.
  std::error_code ec;
  std::optional<std::filesystem::path> aside;
  if (std::filesystem::exists(final_path, ec)) {
    aside = final_path.parent_path() / hidden_name(final_path.filename().string(), "old");
    std::filesystem::rename(final_path, *aside, ec);
    if (ec == std::errc::no_such_file_or_directory) aside.reset();  // retired by another process meanwhile
    else if (ec)
      throw std::runtime_error("cannot write checkpoint: cannot move the old \"" + final_path.string() +
                               "\" aside: " + ec.message());
  }
  std::filesystem::rename(temp, final_path, ec);
  if (ec) {
    std::error_code ignored;
    if (aside) std::filesystem::rename(*aside, final_path, ignored);
    throw std::runtime_error("cannot write checkpoint: renaming \"" + temp.string() + "\" to \"" +
                             final_path.string() + "\" failed: " + ec.message());
  }
  return aside;
}


}  // namespace detail

// The complete checkpoints in dir, oldest first. A checkpoint moved aside
// while it is replaced (on a file system that cannot exchange directories)
// counts while nothing has its name.
TYPEFLOW_IO_INLINE std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& dir)
#if TYPEFLOW_IO_DEFINITIONS
{
  std::vector<std::pair<std::int64_t, std::filesystem::path>> found, aside;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (const auto n = detail::checkpoint_number(name)) {
      if (detail::complete_checkpoint(entry.path())) found.emplace_back(*n, entry.path());
    } else if (const auto m = detail::hidden_number(name);
               m && detail::hidden_pid_at(name, "old") && detail::complete_checkpoint(entry.path())) {
      aside.emplace_back(*m, entry.path());
    }
  }
  for (auto& a : aside)
    if (std::none_of(found.begin(), found.end(), [&](const auto& f) { return f.first == a.first; }))
      found.push_back(std::move(a));
  std::sort(found.begin(), found.end());
  std::vector<std::filesystem::path> out;
  std::optional<std::int64_t> last;
  for (auto& f : found) {
    if (last == f.first) continue;  // two set aside under one number: either is whole
    last = f.first;
    out.push_back(std::move(f.second));
  }
  return out;
}
#else
;
#endif

// The newest complete checkpoint in dir, if any.
inline std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& dir) {
  auto all = list_checkpoints(dir);
  if (all.empty()) return std::nullopt;
  return all.back();
}

// Makes dir ready for checkpoint `number`: creates it, tidies it (what dead
// writers left), and refuses, before anything is written, a dir that holds a
// newer checkpoint. write_checkpoint does this first; across processes the
// chief does it before the workers stage their shards (they stage after it:
// its tidying removes staged shards of other numbers).
TYPEFLOW_IO_INLINE void prepare_checkpoint_dir(const std::filesystem::path& dir, std::int64_t number, int keep,
                                               std::optional<std::int64_t> staging = std::nullopt)
#if TYPEFLOW_IO_DEFINITIONS
{
  if (keep < 1) throw std::invalid_argument("save_checkpoint: keep must be at least 1; got " + std::to_string(keep));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot write checkpoint: cannot create \"" + dir.string() + "\": " + ec.message());
  detail::tidy_checkpoints(dir, staging);
  const std::string name = detail::checkpoint_name(number);
  if (const auto newest = latest_checkpoint(dir)) {
    if (detail::number_of(*newest).value_or(0) > number)
      throw std::runtime_error("cannot write checkpoint: \"" + dir.string() + "\" holds " + newest->filename().string() +
                               ", newer than this one (" + name + ", update " + std::to_string(number) +
                               "): loading the directory would take that one, and keeping the newest " +
                               std::to_string(keep) + " would remove this one at once. Write into another "
                               "directory, or remove the newer checkpoints first");
  }
}
#else
;
#endif

// Writes a checkpoint numbered `number` into dir (created if absent) and
// keeps the newest `keep` (at least 1), never removing the one just
// written. The manifest gains "checksums", each tensor's CRC-32C, and with
// `shards` (a zero<k> model's slots) "shards", the layout of the shard files
// written here or moved in from where their workers staged them. Throws
// std::runtime_error naming the path and the failing step, or, before
// writing anything, when dir holds a checkpoint numbered above `number`;
// whatever was in dir before stays loadable.
TYPEFLOW_IO_INLINE std::filesystem::path write_checkpoint(const std::filesystem::path& dir, std::int64_t number,
                                                          std::span<const tensor_to_write> tensors,
                                                          const nlohmann::ordered_json& manifest, int keep = 3,
                                                          const checkpoint_shards_to_write* shards = nullptr)
#if TYPEFLOW_IO_DEFINITIONS
{
  const bool staged = shards && shards->others_staged;
  prepare_checkpoint_dir(dir, number, keep, staged ? std::optional(number) : std::nullopt);
  std::error_code ec;
  const std::string name = detail::checkpoint_name(number);

  nlohmann::ordered_json with_checksums = manifest;
  nlohmann::ordered_json checksums = nlohmann::ordered_json::object();
  for (const auto& t : tensors)
    checksums[t.name] = crc32c_text(std::span(static_cast<const std::byte*>(t.data), t.bytes));
  with_checksums["checksums"] = std::move(checksums);

  const std::filesystem::path temp = dir / detail::hidden_name(name, "tmp");
  struct temp_guard {
    std::filesystem::path path;
    bool committed = false;
    ~temp_guard() {
      std::error_code ignored;
      if (!committed) std::filesystem::remove_all(path, ignored);
    }
  } guard{temp};
  if (!std::filesystem::create_directory(temp, ec) || ec)
    throw std::runtime_error("cannot write checkpoint: cannot create \"" + temp.string() + "\": " +
                             (ec ? ec.message() : std::string("it exists")));

  write_safetensors(temp / "state.safetensors", tensors, {{"format", "typeflow-checkpoint"}});
  if (shards) {
    checkpoint_shard_layout layout{shards->bounds, {}};
    const int count = static_cast<int>(shards->bounds.size()) - 1;
    for (int i = 0; i < count; ++i) {
      const auto here = std::find_if(shards->here.begin(), shards->here.end(),
                                     [&](const checkpoint_shard& s) { return s.index == i; });
      const std::string file = checkpoint_shard_name(i, count);
      if (here != shards->here.end()) {
        layout.files.push_back(write_checkpoint_shard(temp / file, *here, count));
        continue;
      }
      if (!staged)
        throw std::logic_error("write_checkpoint: shard " + std::to_string(i) + " of " + std::to_string(count) +
                               " is neither written here nor staged");
      const std::filesystem::path from = staged_shard_path(dir, name, i, count);
      layout.files.push_back(read_staged_shard(from, i, count, shards->bounds[static_cast<std::size_t>(i)],
                                               shards->bounds[static_cast<std::size_t>(i) + 1]));
      std::filesystem::rename(from, temp / file, ec);
      if (ec)
        throw std::runtime_error("cannot write checkpoint: moving the staged shard \"" + from.string() + "\" into \"" +
                                 temp.string() + "\" failed: " + ec.message());
    }
    with_checksums["shards"] = shard_layout_json(layout);
  }
  {
    const std::string text = with_checksums.dump(2) + "\n";
    const std::filesystem::path path = temp / "manifest.json";
    detail::fd_guard file(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (file.get() < 0)
      throw std::runtime_error("cannot write checkpoint: cannot create \"" + path.string() + "\": " +
                               detail::errno_text(errno));
    if (const int error = detail::write_fully(file.get(), text.data(), text.size()); error != 0)
      throw std::runtime_error("cannot write checkpoint: writing \"" + path.string() + "\" failed: " +
                               detail::errno_text(error));
    if (::fsync(file.get()) != 0 || file.close_now() != 0)
      throw std::runtime_error("cannot write checkpoint: fsync of \"" + path.string() + "\" failed: " +
                               detail::errno_text(errno));
  }
  detail::fsync_path(temp, O_RDONLY | O_DIRECTORY, "directory");

  const std::filesystem::path final_path = dir / name;
  const std::optional<std::filesystem::path> replaced = detail::place_checkpoint(temp, final_path);
  guard.committed = true;
  detail::fsync_path(dir, O_RDONLY | O_DIRECTORY, "directory");
  if (replaced) detail::retire_checkpoint(*replaced);

  // The newest `keep` stay, and always the one just written.
  const auto all = list_checkpoints(dir);
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < all.size(); ++i)
    if (all[i] != final_path) detail::retire_checkpoint(all[i]);
  return final_path;
}
#else
;
#endif

// Removes every checkpoint in dir, and the hidden directories that killed
// writers left there, each taken out of its name before it is removed (so
// that a kill half-way leaves nothing that looks like a checkpoint), then dir
// itself when nothing else is in it. What backup_and_restore does when
// training ends.
TYPEFLOW_IO_INLINE void remove_checkpoints(const std::filesystem::path& dir)
#if TYPEFLOW_IO_DEFINITIONS
{
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return;
  detail::tidy_checkpoints(dir);
  for (const auto& c : list_checkpoints(dir)) detail::retire_checkpoint(c);
  std::filesystem::remove(dir, ec);  // only when nothing else is in it
}
#else
;
#endif

struct checkpoint_read {
  std::filesystem::path path;  // the checkpoint's directory
  nlohmann::json manifest;
  safetensors_file tensors;
  std::optional<checkpoint_shard_layout> shards;  // a zero<k> model's slots (read with checkpoint_shard_reader)
};

namespace detail {
// One checkpoint's directory, read and checked.
TYPEFLOW_IO_INLINE checkpoint_read read_checkpoint_at(const std::filesystem::path& where)
#if TYPEFLOW_IO_DEFINITIONS
{
  const std::filesystem::path manifest_path = where / "manifest.json";
  std::ifstream in(manifest_path);
  if (!in) throw std::runtime_error("load_checkpoint: cannot open \"" + manifest_path.string() + "\"");
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("load_checkpoint: \"" + manifest_path.string() + "\" is not valid JSON: " + e.what());
  }
  // Each field's JSON type is looked at before it is converted.
  const auto format = manifest.is_object() ? manifest.find("format") : manifest.end();
  if (!manifest.is_object() || format == manifest.end() || !format->is_string() || *format != "typeflow-checkpoint")
    throw std::runtime_error("load_checkpoint: \"" + manifest_path.string() + "\" is not a typeflow checkpoint manifest");
  const auto stated = manifest.find("format_version");
  const bool known = stated != manifest.end() && stated->is_number_integer() &&
                     (stated->is_number_unsigned() ? stated->get<std::uint64_t>() <= static_cast<std::uint64_t>(checkpoint_format_version)
                                                   : stated->get<std::int64_t>() >= 0);
  const std::int64_t version = known ? stated->get<std::int64_t>() : -1;
  if (version < oldest_checkpoint_format_version || version > checkpoint_format_version)
    throw std::runtime_error("load_checkpoint: \"" + manifest_path.string() + "\" has format version " +
                             (stated == manifest.end() ? std::string("(none)") : stated->dump()) +
                             "; this typeflow reads versions " +
                             std::to_string(oldest_checkpoint_format_version) + " to " +
                             std::to_string(checkpoint_format_version));
  safetensors_file tensors = safetensors_file::read(where / "state.safetensors");
  // Version 3 on: every tensor's CRC-32C, which a flipped bit in the data changes.
  if (const auto sums = manifest.find("checksums"); sums != manifest.end()) {
    const std::string file = "\"" + (where / "state.safetensors").string() + "\"";
    if (!sums->is_object())
      throw std::runtime_error("load_checkpoint: \"" + manifest_path.string() + "\": \"checksums\" is not an object");
    for (const auto& t : tensors.tensors()) {
      const auto recorded = sums->find(t.name);
      if (recorded == sums->end() || !recorded->is_string())
        throw std::runtime_error("load_checkpoint: " + file + " holds \"" + excerpt(t.name) +
                                 "\", which manifest.json records no checksum for");
      const std::string computed = crc32c_text(tensors.data(t.name));
      if (recorded->get<std::string>() != computed)
        throw std::runtime_error("load_checkpoint: " + file + ": the data of \"" + excerpt(t.name) +
                                 "\" does not match the CRC-32C that manifest.json recorded (" +
                                 excerpt(recorded->get<std::string>()) + "; the data gives " + computed +
                                 "): the file is corrupt");
    }
    for (const auto& [name, value] : sums->items())
      if (!tensors.find(name))
        throw std::runtime_error("load_checkpoint: " + file + " lacks \"" + excerpt(name) +
                                 "\", which manifest.json records a checksum for");
  }
  std::optional<checkpoint_shard_layout> shards;
  if (const auto layout = manifest.find("shards"); layout != manifest.end())
    shards = parse_shard_layout(*layout, manifest_path);
  return {where, std::move(manifest), std::move(tensors), std::move(shards)};
}
#else
;
#endif
}  // namespace detail

// Reads the newest complete checkpoint in dir (or dir itself, when it is one
// checkpoint's directory). Throws std::runtime_error naming what is missing
// or malformed.
TYPEFLOW_IO_INLINE checkpoint_read read_checkpoint(const std::filesystem::path& dir)
#if TYPEFLOW_IO_DEFINITIONS
{
  // The directory a checkpoint's name stands for (its inode), which changes
  // when a writer exchanges or retires it: a read that overlapped that may
  // have taken the manifest of one and the state of another, and is done
  // again (at most a few times: a failure that stays is the file's own).
  const auto inode_of = [](const std::filesystem::path& path) -> std::uint64_t {
    struct stat s {};
    return ::stat(path.c_str(), &s) == 0 ? static_cast<std::uint64_t>(s.st_ino) : 0;
  };
  const bool one_checkpoint = std::filesystem::exists(dir / "manifest.json");
  for (int attempt = 0;; ++attempt) {
    std::filesystem::path where = dir;
    if (!one_checkpoint) {
      const auto latest = latest_checkpoint(dir);
      if (!latest)
        throw std::runtime_error("load_checkpoint: \"" + dir.string() +
                                 "\" holds no checkpoint (no ckpt-<n>/ with manifest.json and state.safetensors in it)");
      where = *latest;
    }
    const std::uint64_t before = inode_of(where);
    const bool last_try = one_checkpoint || attempt >= 8;
    try {
      checkpoint_read read = detail::read_checkpoint_at(where);
      if (last_try || inode_of(where) == before) return read;
    } catch (const std::runtime_error&) {
      if (last_try || inode_of(where) == before) throw;
    }
  }
}
#else
;
#endif


}  // namespace typeflow::io

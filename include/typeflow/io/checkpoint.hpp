// Checkpoint directories: what model::save_checkpoint writes, atomically.
//
//   <dir>/ckpt-000000001200/state.safetensors   the tensors (weights, optimizer slots)
//   <dir>/ckpt-000000001200/manifest.json       the rest: format version, what model it
//                                               is for, counters, the loss-scale state
//
// The number is the update count (the model's iterations) when it was
// written. A checkpoint is written into a temporary directory beside the
// others ("<dir>/.ckpt-<n>.tmp-<pid>-<k>"), each file fsync'ed, the
// temporary directory fsync'ed, renamed to its final name and <dir>
// fsync'ed: a crash at any moment leaves every complete checkpoint as it was
// and at worst a temporary directory, which the next write removes when the
// process that made it is gone. Then all but the newest `keep` are removed.
// Reading takes the newest complete one (the one with the highest number
// whose manifest is there).
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
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

#include "typeflow/io/safetensors.hpp"
#include "typeflow/io/compiled.hpp"

namespace typeflow::io {

// 2: "fit" and the optimizer's "learning_rate" (train/checkpointing.hpp);
// version 1 checkpoints, which have neither, are read too.
inline constexpr int checkpoint_format_version = 2;
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

// Removes ".ckpt-*.tmp-<pid>-*" directories whose writer is gone.
inline void remove_abandoned_checkpoints(const std::filesystem::path& dir) {
  remove_abandoned(dir, [](const std::string& name) {
    const auto at = name.find(".tmp-");
    return name.rfind(".ckpt-", 0) == 0 && at != std::string::npos ? at + 5 : std::size_t{0};
  });
}

}  // namespace detail

// The complete checkpoints in dir, oldest first.
TYPEFLOW_IO_INLINE std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& dir)
#if TYPEFLOW_IO_DEFINITIONS
{
  std::vector<std::pair<std::int64_t, std::filesystem::path>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const auto n = detail::checkpoint_number(entry.path().filename().string());
    if (n && std::filesystem::exists(entry.path() / "manifest.json")) found.emplace_back(*n, entry.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::filesystem::path> out;
  for (auto& f : found) out.push_back(std::move(f.second));
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

// Writes a checkpoint numbered `number` into dir (created if absent) and
// keeps the newest `keep` (at least 1). Throws std::runtime_error naming the
// path and the failing step; whatever was in dir before stays loadable.
TYPEFLOW_IO_INLINE std::filesystem::path write_checkpoint(const std::filesystem::path& dir, std::int64_t number,
                                                          std::span<const tensor_to_write> tensors,
                                                          const nlohmann::ordered_json& manifest, int keep = 3)
#if TYPEFLOW_IO_DEFINITIONS
{
  if (keep < 1) throw std::invalid_argument("save_checkpoint: keep must be at least 1; got " + std::to_string(keep));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot write checkpoint: cannot create \"" + dir.string() + "\": " + ec.message());
  detail::remove_abandoned_checkpoints(dir);

  static std::atomic<unsigned> serial{0};  // two saves of one process never share a directory
  const std::string name = detail::checkpoint_name(number);
  const std::filesystem::path temp =
      dir / ("." + name + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(serial++));
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
  {
    const std::string text = manifest.dump(2) + "\n";
    const std::filesystem::path path = temp / "manifest.json";
    detail::fd_guard file(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (file.get() < 0)
      throw std::runtime_error("cannot write checkpoint: cannot create \"" + path.string() + "\": " +
                               detail::errno_text(errno));
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(file.get(), text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        throw std::runtime_error("cannot write checkpoint: writing \"" + path.string() + "\" failed: " +
                                 detail::errno_text(errno));
      done += static_cast<std::size_t>(n);
    }
    if (::fsync(file.get()) != 0 || file.close_now() != 0)
      throw std::runtime_error("cannot write checkpoint: fsync of \"" + path.string() + "\" failed: " +
                               detail::errno_text(errno));
  }
  detail::fsync_path(temp, O_RDONLY | O_DIRECTORY, "directory");

  // Into place. A checkpoint of the same number is replaced: moved aside
  // first (rename cannot replace a non-empty directory), removed after.
  const std::filesystem::path final_path = dir / name;
  const std::filesystem::path aside = dir / ("." + name + ".old-" + std::to_string(::getpid()));
  const bool replacing = std::filesystem::exists(final_path);
  if (replacing) {
    std::filesystem::remove_all(aside, ec);
    std::filesystem::rename(final_path, aside, ec);
    if (ec)
      throw std::runtime_error("cannot write checkpoint: cannot move the old \"" + final_path.string() +
                               "\" aside: " + ec.message());
  }
  std::filesystem::rename(temp, final_path, ec);
  if (ec) {
    if (replacing) std::filesystem::rename(aside, final_path, ec);
    throw std::runtime_error("cannot write checkpoint: renaming \"" + temp.string() + "\" to \"" +
                             final_path.string() + "\" failed: " + ec.message());
  }
  guard.committed = true;
  detail::fsync_path(dir, O_RDONLY | O_DIRECTORY, "directory");
  if (replacing) std::filesystem::remove_all(aside, ec);

  // The newest `keep` stay.
  auto all = list_checkpoints(dir);
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < all.size(); ++i) std::filesystem::remove_all(all[i], ec);
  return final_path;
}
#else
;
#endif

struct checkpoint_read {
  std::filesystem::path path;  // the checkpoint's directory
  nlohmann::json manifest;
  safetensors_file tensors;
};

// Reads the newest complete checkpoint in dir (or dir itself, when it is one
// checkpoint's directory). Throws std::runtime_error naming what is missing
// or malformed.
TYPEFLOW_IO_INLINE checkpoint_read read_checkpoint(const std::filesystem::path& dir)
#if TYPEFLOW_IO_DEFINITIONS
{
  std::filesystem::path where = dir;
  if (!std::filesystem::exists(dir / "manifest.json")) {
    const auto latest = latest_checkpoint(dir);
    if (!latest)
      throw std::runtime_error("load_checkpoint: \"" + dir.string() +
                               "\" holds no checkpoint (no ckpt-<n>/manifest.json in it)");
    where = *latest;
  }
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
  return {where, std::move(manifest), safetensors_file::read(where / "state.safetensors")};
}
#else
;
#endif

}  // namespace typeflow::io

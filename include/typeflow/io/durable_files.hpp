// Files that are whole or absent: what the weights files, checkpoints and
// their manifests share so that a crash, a full disk or a killed process
// never leaves half a file where a good one used to be.
//
//   write_atomically(path, fail, body)   body's bytes go to "<path>.tmp-<pid>-<n>"
//                                        beside path, are fsync'ed, and the file
//                                        is renamed onto path (then the directory
//                                        is fsync'ed);
//   remove_abandoned(dir, is_prefix)     leftovers of writers whose process is gone;
//   read_whole_file(path, kind)          a file's bytes, every failure named;
//   fd_guard, write_fully, errno_text    the POSIX calls underneath, with their errors.
//
// Everything here reports errors through errno values or the caller's `fail`,
// so that each format's messages name its own file and step.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace typeflow::io::detail {

inline std::string errno_text(int error) { return std::strerror(error); }

// Whether process `pid` is gone, so that a temporary file or directory it
// left is ours to remove.
inline bool process_gone(long pid) { return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH; }

// Removes the entries of `directory` named "<prefix><pid>" or
// "<prefix><pid>-<anything>" whose process is gone: a writer killed
// mid-write leaves its temporary file or directory behind. is_prefix(name)
// gives the prefix's length in name, or 0 when name is not one of them.
template <class Prefix>
void remove_abandoned(const std::filesystem::path& directory, Prefix&& is_prefix) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(directory, ec)) {
    const std::string name = entry.path().filename().string();
    const std::size_t at = is_prefix(name);
    if (at == 0 || at >= name.size()) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + at, &end, 10);
    if (end == name.c_str() + at || (*end != '\0' && *end != '-')) continue;  // not a pid
    if (pid == ::getpid() || !process_gone(pid)) continue;
    std::filesystem::remove_all(entry.path(), ec);
  }
}

// "<path>.tmp-<pid>[-<n>]" files beside path.
inline void remove_abandoned_temporaries(const std::filesystem::path& path) {
  const std::string prefix = path.filename().string() + ".tmp-";
  remove_abandoned(path.has_parent_path() ? path.parent_path() : ".", [&](const std::string& name) {
    return name.compare(0, prefix.size(), prefix) == 0 ? prefix.size() : std::size_t{0};
  });
}

// Closes a file descriptor on scope exit unless released.
class fd_guard {
 public:
  explicit fd_guard(int fd) noexcept : fd_(fd) {}
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const noexcept { return fd_; }
  // Closes now and reports close's own error (0 on success), which for a
  // written file can be the first sign that the data did not reach the disk.
  int close_now() noexcept {
    const int fd = std::exchange(fd_, -1);
    return fd >= 0 && ::close(fd) != 0 ? errno : 0;
  }

 private:
  int fd_;
};

// Writes all `size` bytes to fd, through short writes and EINTR; returns 0,
// or the errno of the write that failed.
inline int write_fully(int fd, const void* data, std::size_t size) noexcept {
  const auto* bytes = static_cast<const unsigned char*>(data);
  while (size > 0) {
    // Linux writes at most about 2 GiB per call; ask for 1 GiB at a time.
    const ssize_t written = ::write(fd, bytes, std::min<std::size_t>(size, std::size_t{1} << 30));
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes += written;
    size -= static_cast<std::size_t>(written);
  }
  return 0;
}

// Writes path as a whole or not at all. body(write) calls
// write(data, bytes, what) for each piece, in order; `what` names the piece
// in an error. The bytes go to "<path>.tmp-<pid>-<n>" in the same directory
// (n counts this process's writes, so two writes to one path never share a
// temporary file), are fsync'ed, and the file is renamed onto path. If
// anything fails, the temporary file is removed, whatever was at path is
// left as it was, and fail(message) (a std::runtime_error naming the format
// and the file) is thrown with the failing step and strerror. Temporary
// files beside path whose process is gone (killed mid-write) are removed
// first.
template <class Fail, class Body>
void write_atomically(const std::filesystem::path& path, Fail&& fail, Body&& body) {
  remove_abandoned_temporaries(path);
  static std::atomic<unsigned long> serial{0};
  const std::filesystem::path temp_path =
      std::filesystem::path(path.string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(serial++));

  // Removes the temp file on every way out except success.
  struct temp_file_guard {
    const std::filesystem::path& temp;
    bool committed = false;
    ~temp_file_guard() {
      if (!committed) ::unlink(temp.c_str());
    }
  } temp_guard{temp_path};

  fd_guard file(::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (file.get() < 0) {
    const int error = errno;
    temp_guard.committed = true;  // nothing was created, and a same-named file is not ours
    throw fail("cannot create temporary file \"" + temp_path.string() + "\": " + errno_text(error));
  }
  body([&](const void* data, std::size_t size, const std::string& what) {
    if (const int error = write_fully(file.get(), data, size); error != 0)
      throw fail("writing " + what + " to \"" + temp_path.string() + "\" failed: " + errno_text(error));
  });
  if (::fsync(file.get()) != 0) {
    const int error = errno;
    throw fail("fsync of \"" + temp_path.string() + "\" failed: " + errno_text(error));
  }
  if (const int error = file.close_now(); error != 0)
    throw fail("closing \"" + temp_path.string() + "\" failed: " + errno_text(error));

  std::error_code rename_error;
  std::filesystem::rename(temp_path, path, rename_error);
  if (rename_error) throw fail("renaming \"" + temp_path.string() + "\" onto it failed: " + rename_error.message());
  temp_guard.committed = true;

  // Make the rename itself durable. The new file is already in place, so a
  // failure here is not reported: it would say the write failed when it did not.
  const std::filesystem::path directory = path.has_parent_path() ? path.parent_path() : ".";
  fd_guard dir(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() >= 0) ::fsync(dir.get());
}

// The bytes of the regular file at path, read through short reads and
// EINTR; a failure throws std::runtime_error("cannot read <kind> \"path\": ...")
// naming the step, the byte offset and strerror.
inline std::vector<std::byte> read_whole_file(const std::filesystem::path& path, std::string_view kind) {
  const auto fail = [&](const std::string& what, int error) {
    return std::runtime_error("cannot read " + std::string(kind) + " \"" + path.string() + "\": " + what +
                              ": " + errno_text(error));
  };
  fd_guard file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) {
    const int error = errno;
    throw fail("cannot open it", error);
  }
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) {
    const int error = errno;
    throw fail("cannot stat it", error);
  }
  if (!S_ISREG(info.st_mode)) throw fail("it is not a regular file", S_ISDIR(info.st_mode) ? EISDIR : EINVAL);

  std::vector<std::byte> bytes(static_cast<std::size_t>(info.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(file.get(), bytes.data() + done,
                               std::min<std::size_t>(bytes.size() - done, std::size_t{1} << 30));
    if (got < 0) {
      const int error = errno;
      if (error == EINTR) continue;
      throw fail("reading at byte offset " + std::to_string(done) + " failed", error);
    }
    if (got == 0)
      throw std::runtime_error("cannot read " + std::string(kind) + " \"" + path.string() + "\": it shrank from " +
                               std::to_string(bytes.size()) + " to " + std::to_string(done) +
                               " bytes while being read");
    done += static_cast<std::size_t>(got);
  }
  return bytes;
}

}  // namespace typeflow::io::detail

// An LD_PRELOAD library for crash-point tests: the process kills itself
// with SIGKILL just before its N-th file operation that changes something
// (N from TYPEFLOW_KILL_AT_FILE_OP): a create or an open for writing, a
// write to a file (not to fds 0-2), an fsync, a rename, an unlink or
// remove, a mkdir or rmdir. Nothing is flushed and no handler runs, as when
// a machine loses power between two system calls. Without the variable it
// only passes the calls on. tests/standalone/crash_points_test.cpp kills a
// backup_and_restore run before each of its operations in turn.
//
// Not built with the sanitizers: it is loaded into sanitized programs
// (ASAN_OPTIONS=verify_asan_link_order=0 lets ASan accept it first).
#include <atomic>
#include <cstdarg>
#include <cstdlib>

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

namespace {

long kill_at() {
  static const long at = [] {
    const char* text = std::getenv("TYPEFLOW_KILL_AT_FILE_OP");
    return text ? std::strtol(text, nullptr, 10) : 0L;
  }();
  return at;
}

std::atomic<long> operations{0};

// Counts one operation, and dies before the one it was told to.
void before_operation() {
  const long at = kill_at();
  if (at > 0 && ++operations == at) ::kill(::getpid(), SIGKILL);
}

bool writes(int flags) { return (flags & (O_CREAT | O_TRUNC)) != 0 || (flags & O_ACCMODE) != O_RDONLY; }

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

mode_t mode_of(int flags, va_list arguments) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? static_cast<mode_t>(va_arg(arguments, int)) : 0;
}

}  // namespace

extern "C" {

int open(const char* path, int flags, ...) {
  va_list arguments;
  va_start(arguments, flags);
  const mode_t mode = mode_of(flags, arguments);
  va_end(arguments);
  if (writes(flags)) before_operation();
  static const auto real = next<int (*)(const char*, int, ...)>("open");
  return real(path, flags, mode);
}
int open64(const char* path, int flags, ...) {
  va_list arguments;
  va_start(arguments, flags);
  const mode_t mode = mode_of(flags, arguments);
  va_end(arguments);
  if (writes(flags)) before_operation();
  static const auto real = next<int (*)(const char*, int, ...)>("open64");
  return real(path, flags, mode);
}
int openat(int dir, const char* path, int flags, ...) {
  va_list arguments;
  va_start(arguments, flags);
  const mode_t mode = mode_of(flags, arguments);
  va_end(arguments);
  if (writes(flags)) before_operation();
  static const auto real = next<int (*)(int, const char*, int, ...)>("openat");
  return real(dir, path, flags, mode);
}
int openat64(int dir, const char* path, int flags, ...) {
  va_list arguments;
  va_start(arguments, flags);
  const mode_t mode = mode_of(flags, arguments);
  va_end(arguments);
  if (writes(flags)) before_operation();
  static const auto real = next<int (*)(int, const char*, int, ...)>("openat64");
  return real(dir, path, flags, mode);
}
int creat(const char* path, mode_t mode) {
  before_operation();
  static const auto real = next<int (*)(const char*, mode_t)>("creat");
  return real(path, mode);
}
ssize_t write(int fd, const void* data, size_t size) {
  if (fd > 2) before_operation();
  static const auto real = next<ssize_t (*)(int, const void*, size_t)>("write");
  return real(fd, data, size);
}
ssize_t pwrite(int fd, const void* data, size_t size, off_t offset) {
  before_operation();
  static const auto real = next<ssize_t (*)(int, const void*, size_t, off_t)>("pwrite");
  return real(fd, data, size, offset);
}
int fsync(int fd) {
  before_operation();
  static const auto real = next<int (*)(int)>("fsync");
  return real(fd);
}
int fdatasync(int fd) {
  before_operation();
  static const auto real = next<int (*)(int)>("fdatasync");
  return real(fd);
}
int rename(const char* from, const char* to) {
  before_operation();
  static const auto real = next<int (*)(const char*, const char*)>("rename");
  return real(from, to);
}
int renameat(int from_dir, const char* from, int to_dir, const char* to) {
  before_operation();
  static const auto real = next<int (*)(int, const char*, int, const char*)>("renameat");
  return real(from_dir, from, to_dir, to);
}
int renameat2(int from_dir, const char* from, int to_dir, const char* to, unsigned flags) {
  before_operation();
  static const auto real = next<int (*)(int, const char*, int, const char*, unsigned)>("renameat2");
  return real(from_dir, from, to_dir, to, flags);
}
int unlink(const char* path) {
  before_operation();
  static const auto real = next<int (*)(const char*)>("unlink");
  return real(path);
}
int unlinkat(int dir, const char* path, int flags) {
  before_operation();
  static const auto real = next<int (*)(int, const char*, int)>("unlinkat");
  return real(dir, path, flags);
}
int remove(const char* path) {
  before_operation();
  static const auto real = next<int (*)(const char*)>("remove");
  return real(path);
}
int rmdir(const char* path) {
  before_operation();
  static const auto real = next<int (*)(const char*)>("rmdir");
  return real(path);
}
int mkdir(const char* path, mode_t mode) {
  before_operation();
  static const auto real = next<int (*)(const char*, mode_t)>("mkdir");
  return real(path, mode);
}
int mkdirat(int dir, const char* path, mode_t mode) {
  before_operation();
  static const auto real = next<int (*)(int, const char*, mode_t)>("mkdirat");
  return real(dir, path, mode);
}

}  // extern "C"

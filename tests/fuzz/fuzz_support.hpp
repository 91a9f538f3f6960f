// What every fuzz target (tests/fuzz/fuzz_*.cpp) shares: a scratch directory
// for the files a reader must open, and the rule for what a refusal may be.
//
// The rule: a reader given bytes it cannot use throws the error its header
// documents (std::runtime_error for a file, std::invalid_argument for a
// tokenizer's argument), and a file reader's message names the file. Anything
// else (another exception type, a message without the file's name, a crash,
// a sanitizer report, a property below that does not hold) ends the run with
// a message on stderr and abort(), which libFuzzer reports as a crash and
// saves as crash-<sha1>.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include <signal.h>
#include <unistd.h>

namespace typeflow::fuzz {

// Ends the run: a defect was found. libFuzzer saves the input that did it.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "\ntypeflow fuzz: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline void require(bool holds, const std::string& what) {
  if (!holds) fail(what);
}

// memcmp(a, b, n) == 0, where a and b may be null when n is 0 (an empty vector's data()).
inline bool same_bytes(const void* a, const void* b, std::size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

// A directory of this process's own, under /dev/shm when it is there (no
// disk I/O per input), removed at exit. Files are rewritten for every input.
// libFuzzer leaves some runs with _Exit, which skips atexit, so each run
// first removes the directories of earlier runs whose process is gone.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::error_code ec;
    std::filesystem::path base = std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0
                                     ? std::filesystem::path("/dev/shm")
                                     : std::filesystem::temp_directory_path();
    const std::string prefix = "typeflow_fuzz_";
    for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(prefix, 0) != 0) continue;
      const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
        std::error_code ignored;
        std::filesystem::remove_all(entry.path(), ignored);
      }
    }
    std::filesystem::path made = base / (prefix + std::to_string(::getpid()));
    std::filesystem::remove_all(made, ec);
    std::filesystem::create_directories(made, ec);
    if (ec) fail("cannot create the scratch directory " + made.string() + ": " + ec.message());
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir(), ignored);
    });
    return made;
  }();
  return dir;
}

// Writes bytes to scratch_dir() / name (any directories in name are made) and returns its path.
inline std::filesystem::path write_scratch(const std::string& name, const void* data, std::size_t size) {
  const std::filesystem::path path = scratch_dir() / name;
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) fail("cannot write the scratch file " + path.string());
  return path;
}

inline std::filesystem::path write_scratch(const std::string& name, std::string_view text) {
  return write_scratch(name, text.data(), text.size());
}

// Runs read(); a std::runtime_error whose message names `file` (its file
// name, at least) is a proper refusal and returns false; success returns
// true; any other exception escapes, and libFuzzer reports it.
template <class Read>
bool refused_or_read(const std::filesystem::path& file, Read&& read) {
  try {
    read();
    return true;
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    const std::string name = file.filename().string();
    require(message.find(name) != std::string::npos,
            "the refusal does not name the file " + name + ": " + message);
    return false;
  }
}

// Splits an input into two parts at a 2-byte little-endian length at its
// front: [2, 2 + length) and the rest. Short inputs give an empty first part.
struct two_parts {
  std::string_view first, second;
};
inline two_parts split_two(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return {{}, {reinterpret_cast<const char*>(data), size}};
  const std::size_t length = std::min<std::size_t>(data[0] | std::size_t{data[1]} << 8, size - 2);
  const char* text = reinterpret_cast<const char*>(data) + 2;
  return {{text, length}, {text + length, size - 2 - length}};
}

}  // namespace typeflow::fuzz

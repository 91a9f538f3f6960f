// Crash points: a backup_and_restore run (tests/support/crash_point_child.cpp)
// killed just before its N-th file operation, for every N in turn
// (tests/support/kill_at_file_op.cpp, an LD_PRELOAD library), then started
// again, must finish with the parameters of a run that was never killed,
// bit for bit, and leave nothing behind: no backup directory, no hidden
// temporary or retired checkpoint. A kill before the first operation up to
// one after the last: every moment between two system calls that change the
// disk.
//
// A standalone binary: it starts other programs and waits for them.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../support/test_support.hpp"

namespace fs = std::filesystem;
namespace tf_testing = typeflow::testing;

extern char** environ;

namespace {

struct outcome {
  bool killed = false;   // by SIGKILL
  int exit_code = -1;    // when it exited
  std::string errors;    // what it wrote to stderr
};

// Runs the child on (backup, out), killed before file operation `kill_at`
// (0: never), and waits for it.
outcome run_child(const fs::path& backup, const fs::path& out, long kill_at, const fs::path& scratch) {
  std::vector<std::string> variables;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    if (v.rfind("LD_PRELOAD=", 0) != 0 && v.rfind("TYPEFLOW_KILL_AT_FILE_OP=", 0) != 0 && v.rfind("ASAN_OPTIONS=", 0) != 0)
      variables.push_back(v);
  }
  variables.push_back("OMP_NUM_THREADS=1");
  if (kill_at > 0) {
    variables.push_back(std::string("LD_PRELOAD=") + TYPEFLOW_KILL_SHIM);
    variables.push_back("TYPEFLOW_KILL_AT_FILE_OP=" + std::to_string(kill_at));
  }
  // The sanitizer build: ASan accepts a library preloaded ahead of its runtime, and a kill is no leak.
  const char* asan = std::getenv("ASAN_OPTIONS");
  variables.push_back(std::string("ASAN_OPTIONS=") + (asan ? std::string(asan) + ":" : "") +
                      "verify_asan_link_order=0:detect_leaks=0");
  std::vector<char*> envp;
  for (auto& v : variables) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string program = TYPEFLOW_CRASH_CHILD, backup_arg = backup.string(), out_arg = out.string();
  char* argv[] = {program.data(), backup_arg.data(), out_arg.data(), nullptr};
  const fs::path errors_path = scratch / "stderr.txt";

  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const int fd = ::open(errors_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) ::dup2(fd, 2);
    ::execve(argv[0], argv, envp.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  outcome o;
  o.killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  if (WIFEXITED(status)) o.exit_code = WEXITSTATUS(status);
  std::ifstream in(errors_path);
  o.errors.assign(std::istreambuf_iterator<char>(in), {});
  return o;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// What is left under dir, one path a line (empty: nothing).
std::string leftovers(const fs::path& dir) {
  std::ostringstream names;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    names << it->path().string() << "\n";
  return names.str();
}

}  // namespace

TEST_CASE("backup_and_restore killed before any one of its file operations restarts, finishes bit for bit, and leaves nothing") {
  tf_testing::temp_dir base("typeflow_crash_points_test");
  const fs::path backup = base.path / "backup", out = base.path / "out.bin", scratch = base.path / "scratch";
  fs::create_directories(scratch);

  const outcome reference = run_child(backup, out, 0, scratch);
  REQUIRE_MESSAGE(reference.exit_code == 0, reference.errors);
  const std::string expected = file_bytes(out);
  REQUIRE(!expected.empty());
  CHECK_MESSAGE(!fs::exists(backup), "an uninterrupted run left: " << leftovers(backup));

  // Every kill point; under AddressSanitizer, where each run takes seconds,
  // every fifth (the plain build, which CI runs too, covers them all).
#if defined(__SANITIZE_ADDRESS__)
  constexpr long stride = 5;
#else
  constexpr long stride = 1;
#endif
  long kill_points = 0;
  int failures = 0;
  for (long n = 1; n <= 1000 && failures < 5; n += stride) {
    fs::remove_all(backup);
    fs::remove(out);
    const outcome killed = run_child(backup, out, n, scratch);
    if (!killed.killed) {  // past the last operation: the run finished untouched
      CHECK_MESSAGE(killed.exit_code == 0, "with a kill at operation " << n << " it exited " << killed.exit_code
                                                                        << ": " << killed.errors);
      CHECK(file_bytes(out) == expected);
      break;
    }
    ++kill_points;
    const outcome restarted = run_child(backup, out, 0, scratch);
    const bool same = restarted.exit_code == 0 && file_bytes(out) == expected;
    const std::string left = leftovers(backup);
    if (!same || fs::exists(backup)) ++failures;
    CHECK_MESSAGE(restarted.exit_code == 0, "killed before file operation " << n << ", the restart failed: "
                                                                            << restarted.errors);
    CHECK_MESSAGE(same, "killed before file operation " << n << ", the restart finished with other parameters");
    CHECK_MESSAGE(!fs::exists(backup), "killed before file operation " << n << ", the restart left:\n" << left);
  }
  MESSAGE(kill_points << " kill points, each restarted");
  CHECK(kill_points * stride >= 40);  // the run saves and prunes several backups: dozens of operations
}

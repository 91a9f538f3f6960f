// Faults from outside while typeflow runs: a full disk and a read-only
// directory while weights or a checkpoint are saved, a data file cut or
// rewritten during an epoch, a map function that throws inside fit's
// pipeline. Each must end in an error that names what failed, with nothing
// already written lost and no thread left behind.
//
// Stand-ins that work as root in a fresh clone, without mounting anything:
//   full disk         RLIMIT_FSIZE lowered (SIGXFSZ ignored), so a write past
//                     it fails with EFBIG as a write to a full disk fails with
//                     ENOSPC: the same path through the writer.
//   read-only dir     a 0555 directory, written from a forked child in a user
//                     namespace of its own, where root's files belong to no
//                     one it maps and CAP_DAC_OVERRIDE does not apply (EACCES).
// A standalone binary: it changes process-wide limits and signal dispositions.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <typeflow/typeflow.hpp>

#include "../support/test_support.hpp"

namespace tf = typeflow;
namespace fs = std::filesystem;
namespace tf_testing = typeflow::testing;
using tf_testing::contains;
using tf_testing::message_of;

namespace {

// (64) -> (256) -> (4): 17,668 floats, a weights file of about 70 KB.
using net = tf::sequential<tf::input<64>, tf::dense<256>, tf::relu, tf::dense<4>>;
using features = tf::data::tensor_value<float, tf::shape<64>>;
using label = tf::data::tensor_value<std::int32_t, tf::shape<>>;

template <class Model>
void compile_adam(Model& m) {
  m.compile(tf::optimizers::adam{.learning_rate = 0.01}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
}

tf::data::batch_of<16, features, label> batch_number(int index) {
  tf::data::batch_of<16, features, label> b;
  for (std::size_t i = 0; i < b.features.size(); ++i) b.features[i] = static_cast<float>((i * 7 + index) % 13) / 13.f;
  for (int i = 0; i < 16; ++i) b.labels[i] = (i + index) % 4;
  b.valid = 16;
  return b;
}

auto samples(int n) {
  std::vector<float> x(static_cast<std::size_t>(n) * 64);
  std::vector<std::int32_t> y(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) / 17.f;
  for (int i = 0; i < n; ++i) y[i] = i % 4;
  return tf::data::from_tensor_slices<tf::shape<64>>(std::move(x), std::move(y));
}

std::vector<float> weights_of(const auto& m) {
  const auto region = m.parameter_region();
  return {region.begin(), region.end()};
}

// While alive, no file this process writes may grow past `bytes`; a write
// beyond fails with EFBIG (SIGXFSZ, which would kill the process, is ignored).
class file_size_limit {
 public:
  explicit file_size_limit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    saved_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit lowered = saved_;
    lowered.rlim_cur = bytes;  // the soft limit only: it can be raised back
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lowered) == 0);
  }
  ~file_size_limit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::signal(SIGXFSZ, saved_handler_);
  }
  file_size_limit(const file_size_limit&) = delete;
  file_size_limit& operator=(const file_size_limit&) = delete;

 private:
  rlimit saved_{};
  sighandler_t saved_handler_ = SIG_DFL;
};

// Runs save() in a forked child that has entered a user namespace of its
// own, so that a 0555 directory is read-only to it although it is root.
// Returns what save() threw ("" if nothing), or "unshare failed: ..." when
// the kernel allows no user namespace here.
template <class Save>
std::string error_in_user_namespace(Save&& save) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::string outcome;
    if (::unshare(CLONE_NEWUSER) != 0) {
      outcome = std::string("unshare failed: ") + std::strerror(errno);
    } else {
      try {
        save();
      } catch (const std::exception& e) {
        outcome = e.what();
      }
    }
    (void)!::write(pipe_fds[1], outcome.data(), outcome.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string outcome;
  char chunk[4096];
  for (ssize_t got; (got = ::read(pipe_fds[0], chunk, sizeof chunk)) > 0;) outcome.append(chunk, static_cast<std::size_t>(got));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE_MESSAGE(WIFEXITED(status), "the child saving into a read-only directory died: wait status " << status);
  return outcome;
}

// The threads of this process, from /proc/self/task.
int thread_count() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/self/task")) ++n;
  return n;
}

}  // namespace

// ---- A full disk -------------------------------------------------------------------------------------------

TEST_CASE("save_weights on a full disk fails naming the file and EFBIG, the previous file stays whole, no temporary left") {
  tf_testing::temp_dir dir("typeflow_fault_weights_full");
  const fs::path path = dir.path / "model.safetensors";
  tf::model<net> before{/*seed=*/1}, after{/*seed=*/2};
  before.save_weights(path);
  const auto size = fs::file_size(path);
  REQUIRE(size > 16 * 1024);

  std::string message;
  {
    const file_size_limit full(16 * 1024);  // room for the header and a few tensors, not all
    message = message_of<std::runtime_error>([&] { after.save_weights(path); });
  }
  CHECK(contains(message, "cannot write safetensors file \"" + path.string() + "\""));
  CHECK(contains(message, std::strerror(EFBIG)));

  CHECK(dir.files() == std::vector<std::string>{"model.safetensors"});
  CHECK(fs::file_size(path) == size);
  tf::model<net> loaded{/*seed=*/3};
  loaded.load_weights(path);
  CHECK(weights_of(loaded) == weights_of(before));
}

TEST_CASE("save_checkpoint on a full disk fails naming the checkpoint and EFBIG, the previous checkpoint still loads") {
  tf_testing::temp_dir dir("typeflow_fault_checkpoint_full");
  tf::model<net> m{/*seed=*/1};
  compile_adam(m);
  (void)m.train_on_batch(batch_number(0));
  const fs::path first = m.save_checkpoint(dir.path);
  const std::vector<float> saved = weights_of(m);
  (void)m.train_on_batch(batch_number(1));

  std::string message;
  {
    const file_size_limit full(16 * 1024);
    message = message_of<std::runtime_error>([&] { (void)m.save_checkpoint(dir.path); });
  }
  CHECK(contains(message, "cannot write safetensors file \"" + dir.path.string()));
  CHECK(contains(message, std::strerror(EFBIG)));

  CHECK(dir.files() == std::vector<std::string>{first.filename().string()});  // no temporary directory
  tf::model<net> resumed{/*seed=*/2};
  compile_adam(resumed);
  resumed.load_checkpoint(dir.path);
  CHECK(weights_of(resumed) == saved);
}

// ---- A read-only directory ----------------------------------------------------------------------------------

TEST_CASE("save_weights into a read-only directory fails naming the file and EACCES, the previous file stays") {
  tf_testing::temp_dir dir("typeflow_fault_weights_readonly");
  const fs::path path = dir.path / "model.safetensors";
  tf::model<net> before{/*seed=*/1}, after{/*seed=*/2};
  before.save_weights(path);
  REQUIRE(::chmod(dir.path.c_str(), 0555) == 0);
  const std::string message = error_in_user_namespace([&] { after.save_weights(path); });
  REQUIRE(::chmod(dir.path.c_str(), 0755) == 0);

  REQUIRE_MESSAGE(!contains(message, "unshare failed"), message);
  CHECK(contains(message, "cannot write safetensors file \"" + path.string() + "\": cannot create temporary file"));
  CHECK(contains(message, std::strerror(EACCES)));
  CHECK(dir.files() == std::vector<std::string>{"model.safetensors"});
  tf::model<net> loaded{/*seed=*/3};
  loaded.load_weights(path);
  CHECK(weights_of(loaded) == weights_of(before));
}

TEST_CASE("save_checkpoint into a read-only directory fails naming it and EACCES, the previous checkpoint still loads") {
  tf_testing::temp_dir dir("typeflow_fault_checkpoint_readonly");
  tf::model<net> m{/*seed=*/1};
  compile_adam(m);
  (void)m.train_on_batch(batch_number(0));
  const fs::path first = m.save_checkpoint(dir.path);
  const std::vector<float> saved = weights_of(m);
  (void)m.train_on_batch(batch_number(1));

  REQUIRE(::chmod(dir.path.c_str(), 0555) == 0);
  const std::string message = error_in_user_namespace([&] { (void)m.save_checkpoint(dir.path); });
  REQUIRE(::chmod(dir.path.c_str(), 0755) == 0);

  REQUIRE_MESSAGE(!contains(message, "unshare failed"), message);
  CHECK(contains(message, "cannot write checkpoint: cannot create \"" + dir.path.string()));
  CHECK(contains(message, std::strerror(EACCES)));
  CHECK(dir.files() == std::vector<std::string>{first.filename().string()});
  tf::model<net> resumed{/*seed=*/2};
  compile_adam(resumed);
  resumed.load_checkpoint(dir.path);
  CHECK(weights_of(resumed) == saved);
}

// ---- A data file cut or rewritten during an epoch ----------------------------------------------------------

TEST_CASE("text_file and csv read their file whole at construction: cutting or rewriting it mid-epoch changes nothing") {
  tf_testing::temp_dir dir("typeflow_fault_data_rewritten");
  const fs::path text_path = dir.path / "corpus.txt", csv_path = dir.path / "table.csv";
  std::ofstream(text_path) << "call me ishmael";
  std::ofstream(csv_path) << "1,2,0\n3,4,1\n5,6,2\n7,8,3\n";
  const auto text = tf::data::text_file(text_path);
  const auto table = tf::data::csv<3>(csv_path, 2);

  auto text_cursor = text.open();
  auto table_cursor = table.open();
  std::int32_t token = 0;
  decltype(table)::element_type row;
  REQUIRE(text_cursor.next(token));
  REQUIRE(table_cursor.next(row));
  fs::resize_file(text_path, 0);                              // cut
  std::ofstream(csv_path, std::ios::trunc) << "not,a,number\n";  // rewritten
  std::string rest(1, static_cast<char>(token));
  while (text_cursor.next(token)) rest.push_back(static_cast<char>(token));
  int rows = 1;
  while (table_cursor.next(row)) ++rows;
  CHECK(rest == "call me ishmael");
  CHECK(rows == 4);
  CHECK(tf_testing::collect(text).size() == 15);  // the next epoch too

  // A dataset made after the change reads the file as it is now.
  CHECK(tf::data::text_file(text_path).cardinality() == 0);
  CHECK(contains(message_of<std::runtime_error>([&] { (void)tf::data::csv<3>(csv_path, 2); }),
                 "csv: " + csv_path.string() + " line 1"));
}

TEST_CASE("a cache file cut while a pass replays it ends the pass with an error naming the file and the record") {
  tf_testing::temp_dir dir("typeflow_fault_cache_cut");
  const fs::path path = dir.path / "train.cache";
  // 8192 records of 260 bytes: more than the reader's 1 MiB buffer holds, so
  // that the pass reads from the file again after the cut.
  REQUIRE(tf_testing::collect(samples(8192) | tf::data::cache(path)).size() == 8192);  // writes the file
  const auto cached = samples(8192) | tf::data::cache(path);  // a later run: it replays the file
  auto cursor = cached.open(0);
  decltype(cached)::element_type element;
  for (int i = 0; i < 10; ++i) REQUIRE(cursor.next(element));
  fs::resize_file(path, 32 + 20 * sizeof(element));  // 20 of 64 records left
  const std::string message = message_of<std::runtime_error>([&] {
    while (cursor.next(element)) {
    }
  });
  CHECK(contains(message, "cache file " + path.string() + " is truncated"));
  CHECK(contains(message, "of 8192 could not be read at byte offset"));
}

// ---- A map function that throws inside fit ---------------------------------------------------------------

TEST_CASE("a map function that throws in fit, under map(f, 2) | prefetch: fit rethrows it, and every thread is joined") {
  tf::model<net> m{/*seed=*/1};
  compile_adam(m);
  const auto good = samples(64) | tf::data::batch<16>;
  (void)m.fit(good, {.epochs = 1, .verbose = 0});  // OpenMP's threads exist from here on
  const int threads = thread_count();

  const auto throwing = [](auto example) {
    if (example.label[0] == 3 && example.features[0] > 0.5f) throw std::runtime_error("map failed on a sample");
    return example;
  };
  const auto bad = samples(64) | tf::data::map(throwing, 2) | tf::data::batch<16> | tf::data::prefetch(2);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(m.fit(bad, {.epochs = 2, .verbose = 0}), "map failed on a sample", std::runtime_error);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  CHECK(thread_count() == threads);  // the map's two workers and prefetch's producer are gone

  (void)m.fit(good, {.epochs = 1, .verbose = 0});  // and the model trains on afterwards
}

// multi_worker: data-parallel training in several processes, on one machine
// or several, launched by Open MPI's mpirun. One replica per process.
//
//   // mpirun --hostfile hosts -np 4 build/examples/my_training
//   auto train = tf::data::mnist("data/mnist", tf::data::split::train)
//              | tf::data::shard(tf::distribute::worker_count(), tf::distribute::worker_index())
//              | tf::data::map(tf::data::scale(1.f / 255))
//              | tf::data::shuffle(30'000, /*seed=*/42)
//              | tf::data::batch<64>;              // per worker: the global batch is 64 x workers
//   tf::model<mlp, tf::float32, tf::multi_worker> model{/*seed=*/42};
//   model.compile(...);
//   model.fit(train, {.epochs = 3});                // rank 0 prints the progress bar
//   model.save_weights("mlp.safetensors");          // rank 0 writes; the others skip
//
// What the model does with it (train/cpu_engine.hpp's strategy hooks):
//   - constructor: broadcast(weights) from rank 0, so every worker starts from
//     rank 0's weights whatever seed it was given;
//   - every step: each worker runs forward and backward on its own batch, then
//     all_reduce_mean(gradients) (MPI_Iallreduce SUM in place, divided by the
//     number of workers) before the optimizer. Every worker then applies the
//     same update to the same weights, so the weights stay identical (libnbc's
//     all-reduce algorithms compute each sum once and send it to every rank:
//     every rank gets the same bits, which the test checks). With
//     equal per-worker batches, W workers at batch B match one process at
//     batch W x B (tests/mpi/multi_worker_test.cpp checks it to 1e-5);
//   - is_chief() (rank 0) alone prints the progress bar and writes
//     save_weights.
// The loss and metrics that rank 0 prints, and that fit's history and
// evaluate return, are rank 0's own: computed over rank 0's shard (evaluate
// and validation run on whatever dataset each worker is given, with no
// communication). To report a job-wide figure, average it with
// all_reduce_mean(double*, n). batch_norm's moving statistics are per worker;
// rank 0's are the ones saved. Your own callbacks run on every worker: test
// model.is_chief() before writing files. Each worker draws its own dropout
// masks (the model mixes its rank into the dropout seed).
//
// Sharding: the data is not split for you. Give each worker its own part with
// shard(worker_count(), worker_index()), before shuffle (see data/shard.hpp).
// Every worker must run the same number of steps: a worker whose shard holds
// one batch fewer leaves the others waiting at the all-reduce until the
// timeout below.
//
// Without mpirun the same binary runs as one worker (Open MPI's singleton
// start): size() == 1, rank() == 0, and the collectives are no-ops.
//
// MPI's life: the first multi_worker (or worker_count()/worker_index()/...)
// initialises MPI (MPI_Init_thread, MPI_THREAD_FUNNELED: only the main thread
// communicates), unless the program already did. The library then finalises it
// at exit, from a process-wide exit handler (glibc's on_exit, which sees the
// exit status; std::atexit elsewhere). A program that initialised MPI itself
// keeps finalising it itself.
//
// Failures. A worker that dies or stops must not leave the others hanging:
//   - Each collective is non-blocking (MPI_Iallreduce / MPI_Ibcast /
//     MPI_Ibarrier) and polled with MPI_Test against a deadline,
//     multi_worker::timeout (default 45 s, so that a stalled job is stopped
//     within a minute, teardown included; the environment variable
//     TYPEFLOW_WORKER_TIMEOUT=<seconds> sets the default). Past it the call
//     throws std::runtime_error:
//       "multi_worker: rank 0 waited 45 s for the gradient all-reduce; another
//        worker has died or stalled, ..."
//     and the process is marked failed: any later collective throws at once,
//     and at exit the job is aborted (MPI_Abort) rather than finalised.
//   - In a job of several workers, an exception that leaves main (or any other
//     std::terminate) runs typeflow's terminate handler, installed when MPI is
//     initialised: it prints the exception's what() with the rank, and calls
//     MPI_Abort, so mpirun stops every worker at once. (It replaces the
//     previous handler; with one worker the previous handler is kept.)
//   - A worker that exits with a non-zero status (exit(3), return 1 from
//     main) does not finalise MPI (the exit handler sees the status; glibc
//     only): mpirun then stops the whole job, as Open MPI does whenever a
//     process ends non-zero without MPI_Finalize. (Finalising would block
//     until the others reach MPI_Finalize too, i.e. until their deadline.)
//   - A worker killed by a signal (a crash, kill -9) is noticed by mpirun,
//     which kills the others.
//   - A worker that returns 0 early meets the others at exit in a barrier of
//     its own communicator, waiting at most twice the timeout: the others reach
//     their deadline first and abort the job. Should that abort not reach it,
//     it aborts the job itself, rather than wait in MPI_Finalize for workers
//     that will never come.
//   - Open MPI's MPI_Abort asks mpirun to kill every worker and waits for the
//     answer; races in that path have left processes running (open-mpi/ompi
//     #1379; once in this suite, on a heavily loaded machine, a job still ran
//     55 s after an abort). So every MPI_Abort here is watched: a thread ends
//     the process with _Exit(1) if it still runs 10 s later, and a worker that
//     ends non-zero without MPI_Finalize makes mpirun stop the job.
// Measured on the test machine (2 workers, tests/mpi): a throw stops the
// whole job in under half a second, a non-zero exit or a kill -9 in about
// 1.5 s; a stall or an early return stops it one timeout later (5 s timeout:
// about 6.5 s from the start of the job).
#pragma once

// Only MPI's C API is used; skip the C++ bindings MPI-3 removed (and the
// compile time their header costs).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <stdlib.h>  // on_exit (glibc), setenv

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "typeflow/core/foreign_calls.hpp"
#include "typeflow/distribute/strategy.hpp"

namespace typeflow {

namespace distribute::detail {

// The process's MPI state, set up once (the first call to get()).
class mpi_process {
 public:
  static mpi_process& get() {
    static mpi_process process;  // thread-safe, once per program (an inline function's static)
    return process;
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  // The communicator of fit's bookkeeping (the epoch's logs), apart from
  // the steps' world: a worker whose epoch ended early waits there, to the
  // deadline, instead of matching a step's collective that the others have
  // pending (MPI would match the two and fail on their sizes).
  MPI_Comm aside() const noexcept { return aside_comm_ != MPI_COMM_NULL ? aside_comm_ : MPI_COMM_WORLD; }
  // How long a collective waits (multi_worker::timeout reads and sets it).
  static std::chrono::duration<double>& timeout() noexcept;
  bool failed() const noexcept { return failed_; }
  void mark_failed() noexcept { failed_ = true; }

  mpi_process(const mpi_process&) = delete;
  mpi_process& operator=(const mpi_process&) = delete;

 private:
  mpi_process() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
      throw std::logic_error("multi_worker: MPI has already been finalised in this process; MPI cannot start again");
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
#if defined(OPEN_MPI)
      // Open MPI's libnbc runs every in-place (or under-4-process)
      // MPI_Iallreduce as a binomial tree: the whole gradient reduced to rank 0,
      // then broadcast back. Its ring (a reduce-scatter and an allgather, each
      // rank moving 2(W-1)/W of the data) is 3x faster for the gradients here
      // (1.9 M floats, 2 processes: 1.5 ms against 4.7 ms) and, like the tree,
      // hands every rank the same bits. Chosen unless the environment (or
      // mpirun --mca coll_libnbc_iallreduce_algorithm N) already chose.
      ::setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
#endif
      int provided = 0;
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        throw std::runtime_error("multi_worker: MPI_Init_thread failed");
      initialized_here_ = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (size_ > 1 && MPI_Comm_dup(MPI_COMM_WORLD, &aside_comm_) != MPI_SUCCESS)
      throw std::runtime_error("multi_worker: MPI_Comm_dup failed");
    if (initialized_here_) {
      // The exit barrier's own communicator: a worker that leaves early must
      // not match a collective the others still have pending on the world.
      if (size_ > 1 && MPI_Comm_dup(MPI_COMM_WORLD, &exit_comm_) != MPI_SUCCESS)
        throw std::runtime_error("multi_worker: MPI_Comm_dup failed");
#if defined(__GLIBC__)
      ::on_exit(&at_exit, nullptr);  // sees the exit status
#else
      std::atexit([] { at_exit(0, nullptr); });
#endif
    }
    if (size_ > 1) previous_terminate_ = std::set_terminate(&on_terminate);
  }

  // Finalises MPI at exit; when this worker leaves in failure, stops the job
  // instead, so that the other workers do not wait for it.
  static void at_exit(int status, void*) noexcept {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    const auto& p = get();
    if (p.size_ > 1 && status != 0) {
      std::fflush(stdout);
      std::fprintf(stderr,
                   "typeflow multi_worker: rank %d of %d exits with status %d; leaving MPI unfinalised so that "
                   "mpirun stops the whole job instead of the other workers waiting for this one\n",
                   p.rank_, p.size_, status);
      std::fflush(stderr);
      return;
    }
    if (p.size_ > 1 && p.failed_) {
      std::fflush(stdout);
      std::fprintf(stderr,
                   "typeflow multi_worker: rank %d of %d exits after a failed collective; aborting the whole job "
                   "(MPI_Abort)\n",
                   p.rank_, p.size_);
      std::fflush(stderr);
      abort_job();
    }
    if (p.size_ > 1 && !p.others_reach_exit()) {
      std::fflush(stdout);
      std::fprintf(stderr,
                   "typeflow multi_worker: rank %d of %d finished, but not every worker reached the end within "
                   "%g s; aborting the whole job (MPI_Abort) rather than waiting for them in MPI_Finalize\n",
                   p.rank_, p.size_, 2 * timeout().count());
      std::fflush(stderr);
      abort_job();
    }
    MPI_Finalize();
  }

  // Waits, at most twice the timeout, for every worker to reach exit. Twice:
  // the others, stuck in a collective, reach their own deadline first and
  // abort the job with the message that says which operation stalled.
  bool others_reach_exit() const noexcept {
    MPI_Request request;
    if (MPI_Ibarrier(exit_comm_, &request) != MPI_SUCCESS) return false;
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(2 * timeout());
    for (;;) {
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return true;
      if (clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  // MPI_Abort, watched: should it not end this process within 10 s, _Exit(1)
  // does (mpirun then stops the job: a worker ended without MPI_Finalize).
  [[noreturn]] static void abort_job() noexcept {
    try {
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::seconds(10));
        std::fprintf(stderr, "typeflow multi_worker: MPI_Abort has not ended this process after 10 s; _Exit(1)\n");
        std::fflush(stderr);
        std::_Exit(1);
      }).detach();
    } catch (...) {  // no thread: abort unwatched
    }
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // MPI_Abort returned: it should not
  }

  [[noreturn]] static void on_terminate() noexcept {
    const auto& p = get();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized && p.previous_terminate_) p.previous_terminate_();
    std::string reason = "std::terminate without an active exception";
    if (const auto e = std::current_exception()) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        reason = std::string("uncaught exception: ") + x.what();
      } catch (...) {
        reason = "uncaught exception of a type not derived from std::exception";
      }
    }
    std::fflush(stdout);
    std::fprintf(stderr,
                 "typeflow multi_worker: rank %d of %d terminates (%s); aborting the whole job (MPI_Abort) so "
                 "that the other workers stop\n",
                 p.rank_, p.size_, reason.c_str());
    std::fflush(stderr);
    if (!finalized) abort_job();
    std::abort();
  }

  int rank_ = 0;
  int size_ = 1;
  bool initialized_here_ = false;
  bool failed_ = false;  // a collective timed out: MPI's state is unusable
  MPI_Comm exit_comm_ = MPI_COMM_NULL;  // at_exit's barrier (size > 1, MPI initialised here)
  MPI_Comm aside_comm_ = MPI_COMM_NULL;  // aside() (size > 1)
  std::terminate_handler previous_terminate_ = nullptr;
};

// at_exit reads the object after static destruction began; nothing is destroyed.
static_assert(std::is_trivially_destructible_v<mpi_process>);

// The default deadline of one collective: TYPEFLOW_WORKER_TIMEOUT seconds, or 45.
inline std::chrono::duration<double> default_worker_timeout() {
  if (const char* text = std::getenv("TYPEFLOW_WORKER_TIMEOUT")) {
    char* end = nullptr;
    const double seconds = std::strtod(text, &end);
    if (end != text && *end == '\0' && seconds > 0) return std::chrono::duration<double>(seconds);
    std::fprintf(stderr, "typeflow multi_worker: ignoring TYPEFLOW_WORKER_TIMEOUT=\"%s\" (want seconds > 0); using 45\n",
                 text);
  }
  return std::chrono::duration<double>(45.0);
}

inline std::chrono::duration<double>& mpi_process::timeout() noexcept {
  static std::chrono::duration<double> seconds = default_worker_timeout();
  return seconds;
}

}  // namespace distribute::detail

struct multi_worker {
  static constexpr int replicas = 1;  // local replicas: one per process
  static constexpr bool across_processes = true;
  static constexpr bool sync_statistics = false;
  static std::string name() { return "multi_worker"; }

  // How long a collective waits for the other workers before it throws. Set it
  // before training: tf::multi_worker::timeout = std::chrono::seconds(300);
  static inline std::chrono::duration<double>& timeout = distribute::detail::mpi_process::timeout();

  multi_worker() { distribute::detail::mpi_process::get(); }  // MPI starts with the first worker

  int rank() const noexcept { return process().rank(); }
  int size() const noexcept { return process().size(); }
  bool is_chief() const noexcept { return rank() == 0; }

  // data[i] = the mean over the workers of data[i], in place. `operation`
  // names the call in the timeout message.
  void all_reduce_mean(float* data, std::size_t n, const char* operation = "the gradient all-reduce") const {
    all_reduce_mean_of(data, n, MPI_FLOAT, operation);
  }
  void all_reduce_mean(double* data, std::size_t n, const char* operation = "an all-reduce of doubles") const {
    all_reduce_mean_of(data, n, MPI_DOUBLE, operation);
  }

  // The same on a communicator of its own (mpi_process::aside): for what a
  // worker may reach while others are still stepping (fit's epoch logs).
  void all_reduce_mean_aside(double* data, std::size_t n, const char* operation) const {
    const int workers = size();
    if (workers == 1) return;
    check_usable(operation);
    collective(n, operation, [&](std::size_t offset, int count, MPI_Request* request) {
      return MPI_Iallreduce(MPI_IN_PLACE, data + offset, count, MPI_DOUBLE, MPI_SUM, process().aside(), request);
    });
    scale_to_mean(data, n, workers);
  }

  // Whether `ok` holds on every worker: a verdict that all take alike, so
  // that none skips a step, or a collective, that the others take (a loss
  // that is not finite on one worker refuses the update on all).
  bool all_agree(bool ok, const char* operation) const {
    double refused = ok ? 0 : 1;
    all_reduce_sum(&refused, 1, operation);
    return refused == 0;
  }

  // data[i] = the sum over the workers of data[i], in place (zero<2>'s
  // squared norms and penalties, and its verdicts as counts).
  void all_reduce_sum(double* data, std::size_t n, const char* operation = "an all-reduce of doubles") const {
    if (size() == 1) return;
    all_reduce_sum_of(data, n, MPI_DOUBLE, operation);
  }

  // zero<2>'s reduce-scatter (distribute/zero.hpp): `bounds` cuts the region
  // [0, bounds.back()) into one shard per worker. On entry data holds this
  // worker's whole region; on return shard rank() of it, data[bounds[r],
  // bounds[r + 1]), holds the mean over the workers (libnbc sums each element
  // once, so two workers get the all-reduce's bits); the rest is undefined.
  void reduce_scatter_mean(float* data, std::span<const std::size_t> bounds,
                           const char* operation = "the gradient reduce-scatter") const {
    const int workers = size();
    if (workers == 1) return;
    shard_collective(bounds, operation, [&](const shard_counts& shards, MPI_Request* request) {
      return MPI_Ireduce_scatter(MPI_IN_PLACE, data, shards.counts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, request);
    });
    // In place, MPI leaves this worker's sums at the start of the buffer.
    const std::size_t own = static_cast<std::size_t>(rank());
    const std::size_t n = bounds[own + 1] - bounds[own];
    std::memmove(data + bounds[own], data, n * sizeof(float));
    scale_to_mean(data + bounds[own], n, workers);
  }

  // zero<k>'s all-gather: on entry shard r of data, data[bounds[r],
  // bounds[r + 1]), is current on worker r; on return every shard is on every
  // worker, with its owner's bits.
  void all_gather(float* data, std::span<const std::size_t> bounds,
                  const char* operation = "the all-gather of the updated weights") const {
    if (size() == 1) return;
    shard_collective(bounds, operation, [&](const shard_counts& shards, MPI_Request* request) {
      return MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, shards.counts.data(), shards.offsets.data(),
                             MPI_FLOAT, MPI_COMM_WORLD, request);
    });
  }

  // data = rank 0's data, on every worker.
  void broadcast(float* data, std::size_t n, const char* operation = "the broadcast of the initial weights") const {
    if (size() == 1) return;
    check_usable(operation);
    collective(n, operation, [&](std::size_t offset, int count, MPI_Request* request) {
      return MPI_Ibcast(data + offset, count, MPI_FLOAT, 0, MPI_COMM_WORLD, request);
    });
  }

  // Returns when every worker has called it.
  void barrier(const char* operation = "a barrier") const {
    if (size() == 1) return;
    check_usable(operation);
    MPI_Request request;
    {
      detail::foreign_call_scope foreign;
      MPI_Ibarrier(MPI_COMM_WORLD, &request);
    }
    wait(&request, 1, operation);
  }

 private:
  static distribute::detail::mpi_process& process() { return distribute::detail::mpi_process::get(); }

  template <class T>
  void all_reduce_mean_of(T* data, std::size_t n, MPI_Datatype type, const char* operation) const {
    const int workers = size();
    if (workers == 1) return;
    all_reduce_sum_of(data, n, type, operation);
    scale_to_mean(data, n, workers);
  }
  template <class T>
  void all_reduce_sum_of(T* data, std::size_t n, MPI_Datatype type, const char* operation) const {
    check_usable(operation);
    collective(n, operation, [&](std::size_t offset, int count, MPI_Request* request) {
      return MPI_Iallreduce(MPI_IN_PLACE, data + offset, count, type, MPI_SUM, MPI_COMM_WORLD, request);
    });
  }
  // A sum over the workers, divided by their number.
  template <class T>
  static void scale_to_mean(T* data, std::size_t n, int workers) {
    if ((workers & (workers - 1)) == 0) {  // a power of two: its reciprocal is exact, x * (1/W) == x / W
      const T reciprocal = T{1} / static_cast<T>(workers);
      for (std::size_t i = 0; i < n; ++i) data[i] *= reciprocal;
    } else {
      const T divisor = static_cast<T>(workers);
      for (std::size_t i = 0; i < n; ++i) data[i] /= divisor;
    }
  }

  // A shard cut's counts and offsets as MPI takes them (ints): one shard per
  // worker, each offset within an int. Their buffers are kept from call to
  // call (only the main thread communicates), so a step allocates nothing.
  struct shard_counts {
    std::vector<int>& counts = buffer(0);
    std::vector<int>& offsets = buffer(1);
    static std::vector<int>& buffer(int which) {
      static std::vector<int> kept[2];
      return kept[which];
    }
    shard_counts(std::span<const std::size_t> bounds, int workers, const char* operation) {
      counts.clear();
      offsets.clear();
      if (bounds.size() != static_cast<std::size_t>(workers) + 1)
        throw std::invalid_argument(std::string("multi_worker: ") + operation + " is given " +
                                    std::to_string(bounds.size()) + " shard bounds for " + std::to_string(workers) +
                                    " workers (want workers + 1)");
      if (bounds.back() > static_cast<std::size_t>(INT_MAX))
        throw std::length_error(std::string("multi_worker: ") + operation + " over " + std::to_string(bounds.back()) +
                                " floats: MPI's counts and offsets are ints, at most " + std::to_string(INT_MAX));
      for (std::size_t r = 0; r < static_cast<std::size_t>(workers); ++r) {
        offsets.push_back(static_cast<int>(bounds[r]));
        counts.push_back(static_cast<int>(bounds[r + 1] - bounds[r]));
      }
    }
  };

  // One non-blocking collective over a shard cut, `begin(counts, &request)`
  // starting it, waited for against the deadline.
  template <class Begin>
  void shard_collective(std::span<const std::size_t> bounds, const char* operation, Begin&& begin) const {
    check_usable(operation);
    const shard_counts shards(bounds, size(), operation);
    MPI_Request request;
    start(operation, [&] { return begin(shards, &request); });
    wait(&request, 1, operation);
  }

  // Starts one non-blocking collective, `begin()` returning MPI's status.
  template <class Begin>
  void start(const char* operation, Begin&& begin) const {
    detail::foreign_call_scope foreign;
    if (begin() != MPI_SUCCESS) {
      process().mark_failed();
      throw std::runtime_error("multi_worker: rank " + std::to_string(rank()) + " could not start " + operation);
    }
  }

  // Starts `start(offset, count, &request)` over n elements in chunks that an
  // int count can hold, a group at a time, and waits for each group.
  template <class Start>
  void collective(std::size_t n, const char* operation, Start&& start_chunk) const {
    constexpr std::size_t chunk = std::size_t{1} << 30;
    constexpr int group = 8;
    MPI_Request requests[group];
    std::size_t offset = 0;
    do {
      int started = 0;
      while (started < group && (offset < n || (n == 0 && started == 0))) {
        const std::size_t count = std::min(chunk, n - offset);
        start(operation, [&] { return start_chunk(offset, static_cast<int>(count), &requests[started]); });
        ++started;
        offset += count;
      }
      wait(requests, started, operation);
    } while (offset < n);
  }

  void check_usable(const char* operation) const {
    if (process().failed())
      throw std::runtime_error("multi_worker: rank " + std::to_string(rank()) + " cannot run " + operation +
                               ": an earlier collective failed, and the job cannot continue");
  }

  // Polls the requests until they complete or the deadline passes: in a tight
  // loop for the first 50 ms (MPI moves the data only inside MPI_Test, so a
  // step's all-reduce, a few ms, needs every poll it can get; Open MPI's
  // blocking calls spin the same way), then every 200 us, so that a worker
  // waiting long for a slow one leaves the core to others.
  void wait(MPI_Request* requests, int count, const char* operation) const {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const auto limit = std::chrono::duration_cast<clock::duration>(timeout);
    for (;;) {
      int done = 0;
      {
        detail::foreign_call_scope foreign;
        MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE);
      }
      if (done) return;
      const auto waited = clock::now() - start;
      if (waited >= limit) {
        process().mark_failed();
        throw std::runtime_error(timeout_message(operation));
      }
      if (waited > std::chrono::milliseconds(50)) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  std::string timeout_message(const char* operation) const {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", timeout.count());
    return "multi_worker: rank " + std::to_string(rank()) + " waited " + seconds + " s for " + operation +
           "; another worker has died or stalled, or ran out of batches early (every worker must run the same "
           "number of steps). multi_worker::timeout (TYPEFLOW_WORKER_TIMEOUT) sets the wait";
  }
};

// The process's place in the job, for building a pipeline before the model:
//   | tf::data::shard(tf::distribute::worker_count(), tf::distribute::worker_index())
// Both start MPI, as a multi_worker does; without mpirun they are 1 and 0.
namespace distribute {
inline int worker_count() { return detail::mpi_process::get().size(); }
inline int worker_index() { return detail::mpi_process::get().rank(); }
inline bool is_chief_worker() { return worker_index() == 0; }
}  // namespace distribute

}  // namespace typeflow

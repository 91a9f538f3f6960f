// NCCL for the CUDA backend: the gradient all-reduce of the two data-parallel
// strategies on GPUs (a strategy's collective, so here in distribute/, over
// backend/cuda's runtime).
//
//   nccl_communicators   mirrored<N>: one process, one thread, N local GPUs
//                        (devices 0..N-1), one NCCL rank each (ncclCommInitAll).
//   nccl_communicator    multi_worker: one process per GPU under mpirun, one
//                        NCCL rank each, set up over MPI; failures of other
//                        workers are detected with a deadline, as multi_worker
//                        does on the CPU, and never hang the job forever.
//   bucketed_all_reduce  either of them, overlapped with the backward pass:
//                        the gradients are all-reduced in buckets of ~25 MB as
//                        soon as the backward pass has produced each bucket.
//
// Every all-reduce averages in place (ncclAvg), so the gradients come out as
// the mean over the replicas, as the CPU strategies compute them. (The bits
// may differ from the CPU's: NCCL chooses its own summation order.)
//
// MPI: this header includes <mpi.h> (through distribute/multi_worker.hpp, for
// MPI's start-up and the failure bookkeeping shared with multi_worker):
// typeflow requires MPI everywhere already (typeflow::typeflow links
// MPI::MPI_CXX), so one header is simpler than two. Only nccl_communicator's
// MPI constructor calls MPI, so a program that never calls it (mirrored<N>,
// or a communicator built from an NCCL id shared otherwise) references no MPI
// symbol and runs where no MPI library is installed.
//
// CUDA graphs. Both all-reduces and the bucketed all-reduce can be captured
// (NCCL >= 2.9 supports capture of its collectives). The rules:
//   - Capture on the compute stream. bucketed_all_reduce forks its
//     communication stream from the compute stream (an event recorded on the
//     capturing stream, waited on by the communication stream: the standard
//     fork) and finish() joins it back (an event recorded on the communication
//     stream, waited on by the compute stream). Call finish() before
//     cudaStreamEndCapture, or the capture ends with
//     cudaErrorStreamCaptureUnjoined.
//   - Every rank must capture the same collectives, and launch the graph every
//     step (a graph launch is collective over the ranks that captured it).
//   - nccl_communicator::wait polls cudaStreamQuery, which is illegal during a
//     capture: call it after cudaGraphLaunch, on the launch stream (it throws
//     std::logic_error on a capturing stream).
//   - mirrored<N> (several GPUs in one thread): capture ONE graph that spans
//     every device (begin the capture on replica 0's compute stream, fork the
//     other replicas' compute streams from it with events, join them back at
//     the end), and launch it with one cudaGraphLaunch. A graph per GPU would
//     need one launch per GPU from this thread, and NCCL warns that a launch
//     can then block until the other GPUs' NCCL kernels start, which this
//     thread has not launched yet (a deadlock; see NCCL_GRAPH_MIXING_SUPPORT).
//     NCCL recommends one GPU per process with graphs: prefer multi_worker on
//     GPUs when capturing. (Unverified on hardware: run tests/cuda on 2+ GPUs.)
//   - Destroy the graphs before the communicators: since NCCL 2.26,
//     destroying a communicator waits until no graph refers to it.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/distribute/bucket_plan.hpp"
#include "typeflow/distribute/multi_worker.hpp"

// ncclAvg (2.10), ncclGetLastError (2.13), nonblocking communicators and
// ncclCommFinalize (2.14).
static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0), "typeflow's CUDA backend needs NCCL 2.14 or newer");

namespace typeflow::backend::cuda {

// A failed NCCL call or collective. timed_out(): the collective did not
// complete within the deadline (code() is then ncclInProgress: it was still
// running when the communicator was aborted).
class nccl_error : public std::runtime_error {
 public:
  nccl_error(ncclResult_t code, const std::string& what, bool timed_out = false)
      : std::runtime_error(what), code_(code), timed_out_(timed_out) {}
  ncclResult_t code() const noexcept { return code_; }
  bool timed_out() const noexcept { return timed_out_; }

 private:
  ncclResult_t code_;
  bool timed_out_;
};

namespace detail {

// "invalid usage (NCCL: <the library's last message>)". ncclGetLastError
// carries the detail (which argument, which peer) that the code alone lacks;
// it may describe an earlier asynchronous failure, so it is labelled as NCCL's.
inline std::string describe_nccl(ncclResult_t code, ncclComm_t comm) {
  std::string text = ncclGetErrorString(code);
  const char* last = ncclGetLastError(comm);
  if (last && *last) text += std::string(" (NCCL: ") + last + ")";
  return text;
}

inline void nccl_check(ncclResult_t code, const char* call, const char* file, int line) {
  if (code != ncclSuccess)
    throw nccl_error(code, std::string("typeflow: NCCL call ") + call + " failed at " + file + ":" +
                               std::to_string(line) + ": " + describe_nccl(code, nullptr));
}

// Poll loops wait in a tight loop (yielding, for NCCL's proxy threads) for
// the first 50 ms, as a step's collective takes a few ms, then every 200 us.
inline void poll_pause(std::chrono::steady_clock::duration waited) {
  if (waited < std::chrono::milliseconds(50))
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(200));
}

inline std::string seconds_text(std::chrono::milliseconds t) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(t.count()) / 1000.0);
  return text;
}

// A stream at the device's highest priority: the communication stream, so
// that an all-reduce ready to run is not queued behind backward kernels.
class priority_stream {
 public:
  priority_stream() {
    int least = 0, greatest = 0;
    TYPEFLOW_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    TYPEFLOW_CUDA_CHECK(cudaStreamCreateWithPriority(&handle_, cudaStreamNonBlocking, greatest));
  }
  ~priority_stream() {
    if (handle_) (void)cudaStreamDestroy(handle_);
  }
  priority_stream(priority_stream&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  priority_stream& operator=(priority_stream&& o) noexcept {
    std::swap(handle_, o.handle_);
    return *this;
  }
  cudaStream_t get() const noexcept { return handle_; }

 private:
  cudaStream_t handle_ = nullptr;
};

}  // namespace detail

// Throws nccl_error naming the call, the place, NCCL's error string and its
// last message, unless the call returns ncclSuccess. (For blocking
// communicators: a nonblocking one also returns ncclInProgress; see
// nccl_communicator.)
#define TYPEFLOW_NCCL_CHECK(call) ::typeflow::backend::cuda::detail::nccl_check((call), #call, __FILE__, __LINE__)

// ---------------------------------------------------------------------------
// mirrored<N>: one process drives N local GPUs, replica r on device r.
class nccl_communicators {
 public:
  explicit nccl_communicators(int devices) {
    if (devices < 1) throw std::invalid_argument("typeflow: nccl_communicators needs at least one device");
    require_devices(devices, "mirrored<N>");
    std::vector<int> list(static_cast<std::size_t>(devices));
    std::iota(list.begin(), list.end(), 0);
    std::vector<ncclComm_t> comms(list.size(), nullptr);
    TYPEFLOW_NCCL_CHECK(ncclCommInitAll(comms.data(), devices, list.data()));
    comms_ = std::move(comms);
  }
  ~nccl_communicators() { release(); }
  nccl_communicators(const nccl_communicators&) = delete;
  nccl_communicators& operator=(const nccl_communicators&) = delete;
  nccl_communicators(nccl_communicators&& o) noexcept : comms_(std::move(o.comms_)) { o.comms_.clear(); }
  nccl_communicators& operator=(nccl_communicators&& o) noexcept {
    if (this != &o) {
      release();
      comms_ = std::move(o.comms_);
      o.comms_.clear();
    }
    return *this;
  }

  int size() const noexcept { return static_cast<int>(comms_.size()); }
  int device(int replica) const noexcept { return replica; }
  ncclComm_t get(int replica) const { return comms_.at(static_cast<std::size_t>(replica)); }

  // buffers[r][i] = the mean over the replicas of buffers[·][i], in place, for
  // i < count. buffers[r] lives on device r; the all-reduce runs on
  // streams[r] (one per replica, each on its replica's device), ordered after
  // the work already there. Capturable.
  void all_reduce_mean(float* const* buffers, std::size_t count, cudaStream_t const* streams) {
    grouped("ncclAllReduce (the gradient all-reduce)", buffers, count, [&](int r) {
      return ncclAllReduce(buffers[r], buffers[r], count, ncclFloat, ncclAvg, comms_[r], streams[r]);
    });
  }

  // buffers[r] = buffers[root] for every replica r (the weights after an update).
  void broadcast(float* const* buffers, std::size_t count, int root, cudaStream_t const* streams) {
    if (root < 0 || root >= size())
      throw std::out_of_range("typeflow: nccl_communicators::broadcast: root " + std::to_string(root) +
                              " is not a replica of " + std::to_string(size()));
    grouped("ncclBroadcast", buffers, count, [&](int r) {
      return ncclBroadcast(buffers[r], buffers[r], count, ncclFloat, root, comms_[r], streams[r]);
    });
  }

 private:
  // One collective over every replica: the calls must be grouped, as one
  // thread issues them all and each could otherwise wait for the next.
  template <class Call>
  void grouped(const char* what, float* const* buffers, std::size_t count, Call&& call) {
    if (comms_.empty()) throw std::logic_error("typeflow: nccl_communicators used after being moved from or aborted");
    if (count == 0) return;
    for (int r = 0; r < size(); ++r)
      if (!buffers[r])
        throw std::invalid_argument(std::string("typeflow: nccl_communicators: ") + what + ": replica " +
                                    std::to_string(r) + "'s buffer is null");
    TYPEFLOW_NCCL_CHECK(ncclGroupStart());
    ncclResult_t failed = ncclSuccess;
    int failed_replica = -1;
    for (int r = 0; r < size(); ++r) {
      const ncclResult_t result = call(r);
      if (result != ncclSuccess && failed == ncclSuccess) {
        failed = result;
        failed_replica = r;
      }
    }
    const ncclResult_t ended = ncclGroupEnd();
    if (failed == ncclSuccess && ended == ncclSuccess) return;
    // A call refused inside the group leaves the others launched without it:
    // they would wait forever for the missing rank. Abort every communicator.
    const ncclResult_t code = failed != ncclSuccess ? failed : ended;
    std::string message = std::string("typeflow: nccl_communicators: ") + what +
                          (failed != ncclSuccess ? " failed on replica " + std::to_string(failed_replica)
                                                 : std::string(" failed at ncclGroupEnd")) +
                          ": " + detail::describe_nccl(code, failed_replica >= 0 ? comms_[failed_replica] : nullptr) +
                          "; the communicators are aborted";
    for (ncclComm_t c : comms_)
      if (c) (void)ncclCommAbort(c);
    comms_.clear();
    throw nccl_error(code, message);
  }

  // Finalize every rank in one group (each waits for the others), then free.
  void release() noexcept {
    if (comms_.empty()) return;
    if (ncclGroupStart() == ncclSuccess) {
      for (ncclComm_t c : comms_)
        if (c) (void)ncclCommFinalize(c);
      (void)ncclGroupEnd();
    }
    for (ncclComm_t c : comms_)
      if (c) (void)ncclCommDestroy(c);
    comms_.clear();
  }

  std::vector<ncclComm_t> comms_;
};

// ---------------------------------------------------------------------------
// multi_worker on GPUs: one rank per process, one GPU per rank.
//
// Set-up (collective over `mpi`): MPI is started as multi_worker starts it
// (unless the program already did); the local rank (the rank among the
// processes sharing this node, MPI_Comm_split_type(MPI_COMM_TYPE_SHARED))
// modulo the devices this process sees picks the device (so a launcher that
// gives each rank one GPU through CUDA_VISIBLE_DEVICES works too), which is
// made current for the calling thread; rank 0 creates the NCCL id, MPI
// broadcasts it, and every rank joins with ncclCommInitRankConfig.
//
// The communicator is nonblocking (config.blocking = 0): NCCL's fault
// tolerance needs it, as a blocking one can hang inside NCCL calls when a
// peer is gone, where no deadline can stop it. Every NCCL call here is
// therefore followed by polling ncclCommGetAsyncError until it settles, with
// the deadline. Any failure — a deadline passed (a dead or stalled worker), an
// asynchronous NCCL error (network, a peer's exit) — aborts the communicator
// (ncclCommAbort, which also stops its kernels, so the stream drains), marks
// the process failed as multi_worker does (at exit the job is aborted, not
// finalised, so mpirun stops every worker), and throws nccl_error naming the
// rank and what happened. The buffers' contents are then undefined, and any
// later call throws at once.
//
// A second constructor takes an NCCL id shared by other means (another
// launcher, or one process alone, as the CUDA tests do without MPI); it uses
// no MPI, so a failure there marks no MPI process.
class nccl_communicator {
 public:
  // multi_worker::timeout (TYPEFLOW_WORKER_TIMEOUT, default 45 s), in ms.
  static std::chrono::milliseconds default_timeout() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(multi_worker::timeout);
  }

  explicit nccl_communicator(MPI_Comm mpi = MPI_COMM_WORLD, std::chrono::milliseconds timeout = default_timeout())
      : timeout_(timeout) {
    distribute::detail::mpi_process::get();  // MPI starts here unless it already has
    on_failure_ = [] { distribute::detail::mpi_process::get().mark_failed(); };
    MPI_Comm_rank(mpi, &rank_);
    MPI_Comm_size(mpi, &size_);
    local_rank_ = local_rank_of(mpi);
    std::string why;
    const int visible = device_count(&why);
    if (visible == 0)
      throw std::runtime_error("typeflow: nccl_communicator: rank " + std::to_string(rank_) +
                               " needs a CUDA device and sees none (" + why + ")");
    device_ = local_rank_ % visible;
    TYPEFLOW_CUDA_CHECK(cudaSetDevice(device_));
    start(share_unique_id(mpi));
  }

  // Rank `rank` of `size` on `device` (made current), joining the ranks that
  // were given the same id (from one ncclGetUniqueId, shared by the caller).
  nccl_communicator(const ncclUniqueId& id, int rank, int size, int device,
                    std::chrono::milliseconds timeout = default_timeout())
      : rank_(rank), size_(size), local_rank_(device), device_(device), timeout_(timeout) {
    if (size < 1 || rank < 0 || rank >= size)
      throw std::invalid_argument("typeflow: nccl_communicator: rank " + std::to_string(rank) + " of " +
                                  std::to_string(size) + " is not a rank");
    TYPEFLOW_CUDA_CHECK(cudaSetDevice(device_));
    start(id);
  }

  // Finalises (waits, up to the deadline, until the communicator is quiescent
  // on every rank: NCCL's finalize synchronises with the peers) and frees it;
  // past the deadline, or on an error, aborts it instead and marks the process
  // failed.
  ~nccl_communicator() {
    if (!comm_) return;
    bool clean = false;
    const ncclResult_t started = ncclCommFinalize(comm_);
    if (started == ncclSuccess || started == ncclInProgress) {
      const auto start = std::chrono::steady_clock::now();
      for (;;) {
        ncclResult_t state = ncclInProgress;
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
        if (state != ncclInProgress) {
          clean = state == ncclSuccess;
          break;
        }
        const auto waited = std::chrono::steady_clock::now() - start;
        if (waited >= timeout_) break;
        detail::poll_pause(waited);
      }
    }
    if (clean) {
      (void)ncclCommDestroy(comm_);
    } else {
      (void)ncclCommAbort(comm_);
      if (on_failure_) on_failure_();
    }
    comm_ = nullptr;
  }

  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int local_rank() const noexcept { return local_rank_; }  // among the ranks on this node (MPI set-up)
  int device() const noexcept { return device_; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  bool aborted() const noexcept { return comm_ == nullptr; }
  ncclComm_t get() const noexcept { return comm_; }

  // buffer[i] = the mean over the ranks of buffer[i], in place, on `stream`
  // (a stream of device()). Returns once the all-reduce is enqueued; wait()
  // for it. Capturable.
  void all_reduce_mean(float* buffer, std::size_t count, cudaStream_t stream,
                       const char* operation = "the gradient all-reduce") {
    usable(operation);
    if (count == 0) return;
    const device_guard on(device_);
    settle(ncclAllReduce(buffer, buffer, count, ncclFloat, ncclAvg, comm_, stream), operation);
  }

  // buffer = rank `root`'s buffer, on every rank.
  void broadcast(float* buffer, std::size_t count, int root, cudaStream_t stream,
                 const char* operation = "the broadcast of the initial weights") {
    usable(operation);
    if (root < 0 || root >= size_)
      throw std::out_of_range("typeflow: nccl_communicator::broadcast: root " + std::to_string(root) +
                              " is not a rank of " + std::to_string(size_));
    if (count == 0) return;
    const device_guard on(device_);
    settle(ncclBroadcast(buffer, buffer, count, ncclFloat, root, comm_, stream), operation);
  }

  // Returns once everything enqueued on `stream` has completed. Polls
  // cudaStreamQuery and ncclCommGetAsyncError instead of blocking in
  // cudaStreamSynchronize, which would never return if a peer died in the
  // middle of a collective. On an asynchronous NCCL error or past `timeout`:
  // aborts the communicator and throws nccl_error naming the rank and what
  // happened. Not inside a stream capture (see the header comment).
  void wait(cudaStream_t stream, std::chrono::milliseconds timeout,
            const char* operation = "the gradient all-reduce") {
    usable(operation);
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    TYPEFLOW_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
    if (capturing != cudaStreamCaptureStatusNone)
      throw std::logic_error("typeflow: nccl_communicator::wait on a stream that is being captured: wait after "
                             "launching the graph, on the stream it was launched on");
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    for (;;) {
      check_async(operation);
      const cudaError_t queried = cudaStreamQuery(stream);
      if (queried == cudaSuccess) {
        check_async(operation);  // a failure that let the stream drain
        return;
      }
      if (queried != cudaErrorNotReady) {
        (void)cudaGetLastError();
        abort(prefix() + "failed waiting for " + operation + ": cudaStreamQuery returned " +
              cudaGetErrorName(queried) + " (" + cudaGetErrorString(queried) + ")");
        const std::string call =
            "cudaStreamQuery (nccl_communicator rank " + std::to_string(rank_) + " waiting for " + operation + ")";
        throw cuda_error(queried, call.c_str(), __FILE__, __LINE__);
      }
      const auto waited = clock::now() - start;
      if (waited >= timeout) {
        const std::string message =
            prefix() + "waited " + detail::seconds_text(timeout) + " s for " + operation +
            "; another worker has died or stalled, or ran out of batches early (every worker must run the same "
            "number of steps). The NCCL communicator is aborted. multi_worker::timeout (TYPEFLOW_WORKER_TIMEOUT) "
            "sets the default wait";
        abort(message);
        throw nccl_error(ncclInProgress, message, /*timed_out=*/true);
      }
      detail::poll_pause(waited);
    }
  }
  void wait(cudaStream_t stream) { wait(stream, timeout_); }

 private:
  std::string prefix() const {
    return "typeflow: nccl_communicator: rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
           " (device " + std::to_string(device_) + ") ";
  }

  static int local_rank_of(MPI_Comm mpi) {
    MPI_Comm node = MPI_COMM_NULL;
    int rank = 0;
    MPI_Comm_rank(mpi, &rank);
    if (MPI_Comm_split_type(mpi, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) != MPI_SUCCESS)
      throw std::runtime_error("typeflow: nccl_communicator: rank " + std::to_string(rank) +
                               ": MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed");
    int local = 0;
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    return local;
  }

  // Rank 0's ncclGetUniqueId, on every rank. Rank 0 broadcasts even when it
  // failed (ok = 0), so that the others fail at once rather than at the
  // deadline. Nonblocking, polled against the deadline like multi_worker's
  // collectives.
  ncclUniqueId share_unique_id(MPI_Comm mpi) {
    struct {
      int ok;
      ncclUniqueId id;
    } payload{};
    ncclResult_t made = ncclSuccess;
    if (rank_ == 0) {
      made = ncclGetUniqueId(&payload.id);
      payload.ok = made == ncclSuccess;
    }
    if (size_ > 1) {
      MPI_Request request;
      if (MPI_Ibcast(&payload, static_cast<int>(sizeof payload), MPI_BYTE, 0, mpi, &request) != MPI_SUCCESS) {
        on_failure_();
        throw std::runtime_error(prefix() + "could not start the MPI broadcast of the NCCL id");
      }
      using clock = std::chrono::steady_clock;
      const auto start = clock::now();
      for (;;) {
        int done = 0;
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        if (done) break;
        const auto waited = clock::now() - start;
        if (waited >= timeout_) {
          on_failure_();
          throw std::runtime_error(prefix() + "waited " + detail::seconds_text(timeout_) +
                                   " s for the NCCL id from rank 0 (MPI_Ibcast); another worker has died or "
                                   "stalled before setting up NCCL");
        }
        detail::poll_pause(waited);
      }
    }
    if (!payload.ok)
      throw nccl_error(rank_ == 0 ? made : ncclSystemError,
                       rank_ == 0 ? prefix() + "ncclGetUniqueId failed: " + detail::describe_nccl(made, nullptr)
                                  : prefix() + "cannot set up NCCL: ncclGetUniqueId failed on rank 0");
    return payload.id;
  }

  void usable(const char* operation) const {
    if (!comm_)
      throw nccl_error(ncclInvalidUsage, prefix() + "cannot run " + operation +
                                             ": its NCCL communicator was aborted earlier (" + aborted_because_ + ")");
  }

  // Polls the communicator's state until the call `started` returned has
  // settled (nonblocking calls return ncclInProgress while NCCL works in the
  // background, and nothing may be enqueued on their streams until then).
  void settle(ncclResult_t started, const char* operation) {
    if (started != ncclSuccess && started != ncclInProgress) fail(started, operation);
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    for (;;) {
      ncclResult_t state = ncclInProgress;
      const ncclResult_t queried = ncclCommGetAsyncError(comm_, &state);
      if (queried != ncclSuccess) fail(queried, operation);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(state, operation);
      const auto waited = clock::now() - start;
      if (waited >= timeout_) {
        const std::string message = prefix() + "waited " + detail::seconds_text(timeout_) + " s for NCCL to start " +
                                    operation +
                                    "; another worker has died or stalled. The NCCL communicator is aborted";
        abort(message);
        throw nccl_error(ncclInProgress, message, /*timed_out=*/true);
      }
      detail::poll_pause(waited);
    }
  }

  // An asynchronous error (a network failure, a peer gone) makes the
  // communicator unusable: NCCL's answer is to abort it.
  void check_async(const char* operation) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t queried = ncclCommGetAsyncError(comm_, &state);
    if (queried != ncclSuccess) fail(queried, operation);
    if (state != ncclSuccess && state != ncclInProgress) fail(state, operation);
  }

  [[noreturn]] void fail(ncclResult_t code, const char* operation) {
    const std::string message = prefix() + "NCCL failed in " + operation + ": " + detail::describe_nccl(code, comm_) +
                                ". The NCCL communicator is aborted";
    abort(message);
    throw nccl_error(code, message);
  }

  void abort(const std::string& because) noexcept {
    if (comm_) (void)ncclCommAbort(comm_);
    comm_ = nullptr;
    try {
      aborted_because_ = because;
    } catch (...) {
    }
    if (on_failure_) on_failure_();
  }

  // Joins the communicator: nonblocking, so that the deadline holds here too.
  void start(const ncclUniqueId& id) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const ncclResult_t started = ncclCommInitRankConfig(&comm, size_, id, rank_, &config);
    comm_ = comm;
    settle(started, "creating the NCCL communicator (ncclCommInitRankConfig)");
  }

  ncclComm_t comm_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int device_ = 0;
  std::chrono::milliseconds timeout_;
  std::string aborted_because_;
  // Set when MPI set the communicator up: marks the process failed, as
  // multi_worker does, so that its exit aborts the job. Called, never named
  // elsewhere, so that the other constructor needs no MPI library.
  void (*on_failure_)() = nullptr;
};

// ---------------------------------------------------------------------------
// The gradient all-reduce overlapped with the backward pass.
//
// The gradient region (one flat float array per replica, layer after layer)
// is cut by distribute::plan_buckets into buckets of ~bucket_bytes, last
// layers first. The backward pass calls gradient_ready(l, compute) after
// layer l's backward has been enqueued; when every layer of a bucket is ready,
// an event is recorded on the compute stream there, the communication stream
// (one per replica, highest priority) waits for it, and the bucket's
// all-reduce is launched on the communication stream: it runs while the
// backward pass goes on with the lower layers. Buckets are launched in the
// plan's order (a bucket completed early waits for the ones before it), so
// every rank issues the same collectives in the same order whatever order
// the layers are reported in. finish(compute) launches any bucket not yet
// launched (layers never reported are taken as ready) and makes the compute
// stream wait for all of them; it ends the step.
//
//   mirrored<N>:  bucketed_all_reduce ar(comms, gradient_pointers, offsets, total);
//                 for l from the last layer down: backward of l on every device,
//                   then ar.gradient_ready(l, compute_streams);  // one stream per replica
//                 ar.finish(compute_streams);                    // then the optimizer
//   multi_worker: bucketed_all_reduce ar(comm, gradients, offsets, total);
//                 ... ar.gradient_ready(l, compute); ... ar.finish(compute);
//                 comm.wait(compute);   // the deadline; after the graph launch if captured
//
// Capturable (see the header comment): the events fork the communication
// streams from the capturing compute stream(s) and finish() joins them back.
// The object is bound to its communicator and to the gradient pointers; the
// same object serves every step, eager or captured.
class bucketed_all_reduce {
 public:
  // mirrored<N>: gradients[r] is replica r's region, on device r.
  bucketed_all_reduce(nccl_communicators& comms, std::span<float* const> gradients,
                      std::span<const std::size_t> layer_float_offsets, std::size_t total_floats,
                      std::size_t bucket_bytes = distribute::default_bucket_bytes)
      : local_(&comms), gradients_(gradients.begin(), gradients.end()) {
    if (static_cast<int>(gradients_.size()) != comms.size())
      throw std::invalid_argument("typeflow: bucketed_all_reduce: " + std::to_string(gradients_.size()) +
                                  " gradient regions for " + std::to_string(comms.size()) + " replicas");
    for (int r = 0; r < comms.size(); ++r) devices_.push_back(comms.device(r));
    set_up(layer_float_offsets, total_floats, bucket_bytes);
  }

  // multi_worker: this rank's region, on comm.device().
  bucketed_all_reduce(nccl_communicator& comm, float* gradients, std::span<const std::size_t> layer_float_offsets,
                      std::size_t total_floats, std::size_t bucket_bytes = distribute::default_bucket_bytes)
      : rank_(&comm), gradients_{gradients}, devices_{comm.device()} {
    set_up(layer_float_offsets, total_floats, bucket_bytes);
  }

  bucketed_all_reduce(const bucketed_all_reduce&) = delete;
  bucketed_all_reduce& operator=(const bucketed_all_reduce&) = delete;

  int replicas() const noexcept { return static_cast<int>(devices_.size()); }
  std::size_t layers() const noexcept { return owner_.size(); }
  const std::vector<distribute::gradient_bucket>& buckets() const noexcept { return buckets_; }
  cudaStream_t communication_stream(int replica = 0) const { return streams_.at(static_cast<std::size_t>(replica)); }

  // Layer `layer`'s gradients are enqueued on compute_streams (one per
  // replica, each on its replica's device).
  void gradient_ready(std::size_t layer, std::span<const cudaStream_t> compute_streams) {
    check_streams(compute_streams, "gradient_ready");
    if (layer >= layers())
      throw std::out_of_range("typeflow: bucketed_all_reduce::gradient_ready: layer " + std::to_string(layer) +
                              " of " + std::to_string(layers()));
    if (reported_[layer])
      throw std::logic_error("typeflow: bucketed_all_reduce::gradient_ready: layer " + std::to_string(layer) +
                             " reported twice in one step (finish() ends a step)");
    reported_[layer] = 1;
    const std::size_t b = owner_[layer];
    if (--pending_[b] == 0) mark_ready(b, compute_streams);
    while (launched_ < buckets_.size() && pending_[launched_] == 0) launch(launched_++);
  }
  void gradient_ready(std::size_t layer, cudaStream_t compute_stream) {
    gradient_ready(layer, std::span<const cudaStream_t>(&compute_stream, 1));
  }

  // Launches what is left, then makes each compute stream wait for every
  // all-reduce of the step. Ends the step (the next gradient_ready starts the
  // next one).
  void finish(std::span<const cudaStream_t> compute_streams) {
    check_streams(compute_streams, "finish");
    for (; launched_ < buckets_.size(); ++launched_) {
      if (pending_[launched_] != 0) {
        pending_[launched_] = 0;
        mark_ready(launched_, compute_streams);
      }
      launch(launched_);
    }
    for (std::size_t r = 0; r < devices_.size(); ++r) {
      const device_guard on(devices_[r]);
      done_[r].record(streams_[r]);
      done_[r].wait_on(compute_streams[r]);
    }
    start_step();
  }
  void finish(cudaStream_t compute_stream) { finish(std::span<const cudaStream_t>(&compute_stream, 1)); }

 private:
  void set_up(std::span<const std::size_t> layer_float_offsets, std::size_t total_floats, std::size_t bucket_bytes) {
    for (float* g : gradients_)
      if (!g && total_floats > 0)
        throw std::invalid_argument("typeflow: bucketed_all_reduce: a gradient region is null");
    const std::size_t bucket_floats = bucket_bytes / sizeof(float) > 0 ? bucket_bytes / sizeof(float) : 1;
    buckets_ = distribute::plan_buckets(layer_float_offsets, total_floats, bucket_floats);
    owner_ = distribute::bucket_of_layers(buckets_);
    const std::size_t R = devices_.size();
    for (std::size_t r = 0; r < R; ++r) {
      const device_guard on(devices_[r]);  // streams and events belong to the current device
      owned_streams_.emplace_back();
      streams_.push_back(owned_streams_.back().get());
      done_.emplace_back();
    }
    ready_.reserve(buckets_.size() * R);
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      for (std::size_t r = 0; r < R; ++r) {
        const device_guard on(devices_[r]);
        ready_.emplace_back();
      }
    regions_.resize(R);
    start_step();
  }

  void start_step() {
    pending_.resize(buckets_.size());
    for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].layers();
    reported_.assign(owner_.size(), 0);
    launched_ = 0;
  }

  void check_streams(std::span<const cudaStream_t> compute_streams, const char* what) const {
    if (compute_streams.size() != devices_.size())
      throw std::invalid_argument(std::string("typeflow: bucketed_all_reduce::") + what + ": " +
                                  std::to_string(compute_streams.size()) + " compute stream(s) for " +
                                  std::to_string(devices_.size()) + " replica(s)");
  }

  // The bucket's gradients are complete at this point of each compute stream.
  void mark_ready(std::size_t b, std::span<const cudaStream_t> compute_streams) {
    for (std::size_t r = 0; r < devices_.size(); ++r) {
      const device_guard on(devices_[r]);
      ready_[b * devices_.size() + r].record(compute_streams[r]);
    }
  }

  void launch(std::size_t b) {
    const std::size_t R = devices_.size();
    for (std::size_t r = 0; r < R; ++r) {
      const device_guard on(devices_[r]);
      ready_[b * R + r].wait_on(streams_[r]);  // the fork: the communication stream joins the compute stream
    }
    const auto& bucket = buckets_[b];
    if (bucket.count == 0) return;
    if (local_) {
      for (std::size_t r = 0; r < R; ++r) regions_[r] = gradients_[r] + bucket.offset;
      local_->all_reduce_mean(regions_.data(), bucket.count, streams_.data());
    } else {
      rank_->all_reduce_mean(gradients_[0] + bucket.offset, bucket.count, streams_[0]);
    }
  }

  nccl_communicators* local_ = nullptr;
  nccl_communicator* rank_ = nullptr;
  std::vector<float*> gradients_;  // per replica
  std::vector<int> devices_;       // per replica
  std::vector<distribute::gradient_bucket> buckets_;
  std::vector<std::size_t> owner_;  // per layer: its bucket
  std::vector<detail::priority_stream> owned_streams_;
  std::vector<cudaStream_t> streams_;  // per replica: the communication stream
  std::vector<event> ready_;           // [bucket * replicas + replica]
  std::vector<event> done_;            // per replica
  std::vector<float*> regions_;        // scratch: one bucket's start on every replica
  std::vector<std::size_t> pending_;   // per bucket: layers not yet reported this step
  std::vector<unsigned char> reported_;
  std::size_t launched_ = 0;  // buckets [0, launched_) launched this step
};

}  // namespace typeflow::backend::cuda

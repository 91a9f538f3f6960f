// multi_worker on GPUs: one NCCL rank per process over MPI, with the
// deadline that keeps a dead worker from hanging the job (distribute/nccl.hpp
// has the overview and the capture rules).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/distribute/multi_worker.hpp"
#include "typeflow/distribute/nccl.hpp"

namespace typeflow::backend::cuda {

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

  // zero<2>'s reduce-scatter of [offset, offset + count) of `buffer` over
  // the shards cut at `cut` (size() + 1 bounds): this rank gets the mean of
  // the piece inside its shard, in place (nccl_communicators' has the why of
  // one ncclReduce per piece). Returns once enqueued, as all_reduce_mean.
  void reduce_scatter_mean(float* buffer, std::size_t offset, std::size_t count, std::span<const std::size_t> cut,
                           cudaStream_t stream, const char* operation = "the gradients' reduce-scatter") {
    check_cut(cut, operation);
    grouped(operation, [&] {
      for (int owner = 0; owner < size_; ++owner) {
        const std::size_t lo = std::max(offset, cut[owner]), hi = std::min(offset + count, cut[owner + 1]);
        if (lo >= hi) continue;
        const ncclResult_t result =
            ncclReduce(buffer + lo, buffer + lo, hi - lo, ncclFloat, ncclAvg, owner, comm_, stream);
        if (result != ncclSuccess && result != ncclInProgress) return result;
      }
      return ncclSuccess;
    });
  }
  // zero<k>'s all-gather: each rank's shard [cut[rank], cut[rank + 1]) of
  // `buffer` to every rank, in place.
  void all_gather(float* buffer, std::span<const std::size_t> cut, cudaStream_t stream,
                  const char* operation = "the weights' all-gather") {
    check_cut(cut, operation);
    grouped(operation, [&] {
      for (int owner = 0; owner < size_; ++owner) {
        if (cut[owner] == cut[owner + 1]) continue;
        const ncclResult_t result = ncclBroadcast(buffer + cut[owner], buffer + cut[owner],
                                                  cut[owner + 1] - cut[owner], ncclFloat, owner, comm_, stream);
        if (result != ncclSuccess && result != ncclInProgress) return result;
      }
      return ncclSuccess;
    });
  }
  // buffer[i] = op over the ranks of buffer[i], in place, for any NCCL type
  // (zero<k>'s shard statistics).
  void all_reduce(void* buffer, std::size_t count, ncclDataType_t type, ncclRedOp_t op, cudaStream_t stream,
                  const char* operation) {
    usable(operation);
    if (count == 0) return;
    const device_guard on(device_);
    settle(ncclAllReduce(buffer, buffer, count, type, op, comm_, stream), operation);
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
  void check_cut(std::span<const std::size_t> cut, const char* operation) const {
    if (static_cast<int>(cut.size()) != size_ + 1)
      throw std::invalid_argument(prefix() + operation + ": a cut of " + std::to_string(cut.size()) + " bounds for " +
                                  std::to_string(size_) + " ranks (one more than the ranks)");
  }
  // Several NCCL calls as one group (calls() returns the first that
  // failed), settled as one call: a nonblocking group ends in progress.
  template <class Calls>
  void grouped(const char* operation, Calls&& calls) {
    usable(operation);
    const device_guard on(device_);
    const ncclResult_t started = ncclGroupStart();
    if (started != ncclSuccess) fail(started, operation);
    const ncclResult_t called = calls();
    const ncclResult_t ended = ncclGroupEnd();
    if (called != ncclSuccess) fail(called, operation);
    settle(ended, operation);
  }
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

}  // namespace typeflow::backend::cuda

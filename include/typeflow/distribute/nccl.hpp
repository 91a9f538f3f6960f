// NCCL for the CUDA backend: the gradient all-reduce of the two data-parallel
// strategies on GPUs (a strategy's collective, so here in distribute/, over
// backend/cuda's runtime). This header: NCCL's errors and the one-process
// communicators; the other two beside it.
//
//   nccl_communicators   mirrored<N>: one process, one thread, N local GPUs
//                        (devices 0..N-1), one NCCL rank each (ncclCommInitAll).
//   nccl_communicator    (nccl_communicator.hpp)
//                        multi_worker: one process per GPU under mpirun, one
//                        NCCL rank each, set up over MPI; failures of other
//                        workers are detected with a deadline, as multi_worker
//                        does on the CPU, and never hang the job forever.
//   bucketed_all_reduce  (bucketed_all_reduce.hpp)
//                        either of them, overlapped with the backward pass:
//                        the gradients are all-reduced in buckets of ~25 MB as
//                        soon as the backward pass has produced each bucket.
//
// Every all-reduce averages in place (ncclAvg), so the gradients come out as
// the mean over the replicas, as the CPU strategies compute them. (The bits
// may differ from the CPU's: NCCL chooses its own summation order.)
//
// MPI: nccl_communicator.hpp includes <mpi.h> (through distribute/multi_worker.hpp,
// for MPI's start-up and the failure bookkeeping shared with multi_worker):
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

#include <algorithm>
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
  // what: the collective, as an error names it.
  void all_reduce_mean(float* const* buffers, std::size_t count, cudaStream_t const* streams,
                       const char* what = "ncclAllReduce (the gradient all-reduce)") {
    grouped(what, buffers, count, [&](int r) {
      return ncclAllReduce(buffers[r], buffers[r], count, ncclFloat, ncclAvg, comms_[r], streams[r]);
    });
  }

  // zero<2>'s reduce-scatter of the part [offset, offset + count) of every
  // replica's buffer over the shards cut at `cut` (size() + 1 bounds):
  // replica r gets the mean of the piece inside its shard [cut[r], cut[r +
  // 1]), in place; the rest of its buffer keeps its own values. One
  // ncclReduce per piece, rooted at the piece's owner, all in one group:
  // NCCL's reduce-scatter wants equal pieces, which a bucket and the cut's
  // shorter last shard are not (PyTorch's uneven reduce-scatter is this too).
  void reduce_scatter_mean(float* const* buffers, std::size_t offset, std::size_t count,
                           std::span<const std::size_t> cut, cudaStream_t const* streams, const char* what) {
    check_cut(cut, what);
    grouped(what, buffers, count, [&](int r) {
      for (int owner = 0; owner < size(); ++owner) {
        const std::size_t lo = std::max(offset, cut[owner]), hi = std::min(offset + count, cut[owner + 1]);
        if (lo >= hi) continue;
        const ncclResult_t result =
            ncclReduce(buffers[r] + lo, buffers[r] + lo, hi - lo, ncclFloat, ncclAvg, owner, comms_[r], streams[r]);
        if (result != ncclSuccess) return result;
      }
      return ncclSuccess;
    });
  }
  // zero<k>'s all-gather: every replica's shard [cut[r], cut[r + 1]) of its
  // buffer to every other replica, in place (an ncclBroadcast per shard, in
  // one group, for the uneven cut).
  void all_gather(float* const* buffers, std::span<const std::size_t> cut, cudaStream_t const* streams,
                  const char* what) {
    check_cut(cut, what);
    grouped(what, buffers, cut.back(), [&](int r) {
      for (int owner = 0; owner < size(); ++owner) {
        if (cut[owner] == cut[owner + 1]) continue;
        const ncclResult_t result = ncclBroadcast(buffers[r] + cut[owner], buffers[r] + cut[owner],
                                                  cut[owner + 1] - cut[owner], ncclFloat, owner, comms_[r], streams[r]);
        if (result != ncclSuccess) return result;
      }
      return ncclSuccess;
    });
  }
  // buffers[r][i] = op over the replicas of buffers[·][i], in place, for any
  // NCCL type (zero<k>'s shard statistics: sums of doubles, a least int).
  void all_reduce(void* const* buffers, std::size_t count, ncclDataType_t type, ncclRedOp_t op,
                  cudaStream_t const* streams, const char* what) {
    grouped(what, buffers, count,
            [&](int r) { return ncclAllReduce(buffers[r], buffers[r], count, type, op, comms_[r], streams[r]); });
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
  void check_cut(std::span<const std::size_t> cut, const char* what) const {
    if (static_cast<int>(cut.size()) != size() + 1)
      throw std::invalid_argument(std::string("typeflow: nccl_communicators: ") + what + ": a cut of " +
                                  std::to_string(cut.size()) + " bounds for " + std::to_string(size()) +
                                  " replicas (one more than the replicas)");
  }
  template <class T, class Call>
  void grouped(const char* what, T* const* buffers, std::size_t count, Call&& call) {
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

}  // namespace typeflow::backend::cuda

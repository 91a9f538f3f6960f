// The CUDA runtime, held the way the rest of typeflow holds resources:
// errors become exceptions that name the call and the place, and every
// handle (stream, event, device memory, pinned memory, graph) has an owner.
//
// Compiled by nvcc (and usable from g++ with the CUDA include path: nothing
// here is device code).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

namespace typeflow::backend::cuda {

class cuda_error : public std::runtime_error {
 public:
  cuda_error(cudaError_t code, const char* call, const char* file, int line)
      : std::runtime_error(std::string("typeflow: CUDA call ") + call + " failed at " + file + ":" +
                           std::to_string(line) + ": " + cudaGetErrorName(code) + " (" +
                           cudaGetErrorString(code) + ")"),
        code_(code) {}
  cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

namespace detail {
inline void check(cudaError_t code, const char* call, const char* file, int line) {
  if (code != cudaSuccess) {
    (void)cudaGetLastError();  // clear a sticky-free error so the next call starts clean
    throw cuda_error(code, call, file, line);
  }
}
}  // namespace detail

#define TYPEFLOW_CUDA_CHECK(call) ::typeflow::backend::cuda::detail::check((call), #call, __FILE__, __LINE__)
// After a kernel launch: launch errors (bad configuration) surface here.
#define TYPEFLOW_CUDA_CHECK_LAUNCH() TYPEFLOW_CUDA_CHECK(cudaPeekAtLastError())

// How many devices this process can use; 0 (never an exception) when there is
// no driver or no device, with the reason in `why` when asked.
inline int device_count(std::string* why = nullptr) {
  int n = 0;
  const cudaError_t code = cudaGetDeviceCount(&n);
  if (code != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = std::string(cudaGetErrorName(code)) + ": " + cudaGetErrorString(code);
    return 0;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount found 0 devices";
  return n;
}

// Throws, naming what needed them, unless `count` devices are present.
inline void require_devices(int count, const char* what) {
  std::string why;
  const int found = device_count(&why);
  if (found < count)
    throw std::runtime_error(std::string("typeflow: ") + what + " needs " + std::to_string(count) +
                             " CUDA device(s), found " + std::to_string(found) + (why.empty() ? "" : " (" + why + ")"));
}

// Makes `device` current for the calling thread while the guard lives.
class device_guard {
 public:
  explicit device_guard(int device) {
    TYPEFLOW_CUDA_CHECK(cudaGetDevice(&previous_));
    if (device != previous_) TYPEFLOW_CUDA_CHECK(cudaSetDevice(device));
  }
  ~device_guard() { (void)cudaSetDevice(previous_); }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int previous_ = 0;
};

class stream {
 public:
  stream() { TYPEFLOW_CUDA_CHECK(cudaStreamCreateWithFlags(&handle_, cudaStreamNonBlocking)); }
  ~stream() {
    if (handle_) (void)cudaStreamDestroy(handle_);
  }
  stream(stream&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  stream& operator=(stream&& o) noexcept {
    std::swap(handle_, o.handle_);
    return *this;
  }
  cudaStream_t get() const noexcept { return handle_; }
  void synchronize() const { TYPEFLOW_CUDA_CHECK(cudaStreamSynchronize(handle_)); }

 private:
  cudaStream_t handle_ = nullptr;
};

class event {
 public:
  explicit event(bool timing = false) {
    TYPEFLOW_CUDA_CHECK(cudaEventCreateWithFlags(&handle_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~event() {
    if (handle_) (void)cudaEventDestroy(handle_);
  }
  event(event&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  event& operator=(event&& o) noexcept {
    std::swap(handle_, o.handle_);
    return *this;
  }
  cudaEvent_t get() const noexcept { return handle_; }
  void record(cudaStream_t s) const { TYPEFLOW_CUDA_CHECK(cudaEventRecord(handle_, s)); }
  // Makes `s` wait for this event (no host wait).
  void wait_on(cudaStream_t s) const { TYPEFLOW_CUDA_CHECK(cudaStreamWaitEvent(s, handle_, 0)); }
  void synchronize() const { TYPEFLOW_CUDA_CHECK(cudaEventSynchronize(handle_)); }
  // Milliseconds from `start` to this event (both recorded with timing).
  float milliseconds_since(const event& start) const {
    float ms = 0;
    TYPEFLOW_CUDA_CHECK(cudaEventElapsedTime(&ms, start.handle_, handle_));
    return ms;
  }

 private:
  cudaEvent_t handle_ = nullptr;
};

namespace detail {
// One block of bytes from an allocator pair, owned; move-only.
template <class Allocator>
class owned_bytes {
 public:
  owned_bytes() = default;
  explicit owned_bytes(std::size_t bytes) : bytes_(bytes) {
    if (bytes) Allocator::allocate(&data_, bytes);
  }
  ~owned_bytes() {
    if (data_) Allocator::release(data_);
  }
  owned_bytes(owned_bytes&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  owned_bytes& operator=(owned_bytes&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  template <class T = std::byte>
  T* data() const noexcept {
    return static_cast<T*>(data_);
  }
  std::size_t size() const noexcept { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

struct device_allocator {
  static void allocate(void** p, std::size_t bytes) { TYPEFLOW_CUDA_CHECK(cudaMalloc(p, bytes)); }
  static void release(void* p) noexcept { (void)cudaFree(p); }
};
struct pinned_allocator {
  static void allocate(void** p, std::size_t bytes) { TYPEFLOW_CUDA_CHECK(cudaMallocHost(p, bytes)); }
  static void release(void* p) noexcept { (void)cudaFreeHost(p); }
};
}  // namespace detail

// One cudaMalloc block; 256-byte aligned as cudaMalloc guarantees.
using device_buffer = detail::owned_bytes<detail::device_allocator>;
// Page-locked host memory: the staging side of asynchronous copies.
using pinned_buffer = detail::owned_bytes<detail::pinned_allocator>;

// Host -> device, landed when it returns. cudaMemcpy from pageable memory
// may return once the bytes are staged, before the DMA lands, and it runs on
// the legacy stream, which typeflow's non-blocking streams never wait for: a
// 4 MB upload raced the kernel that read it (seen on an H200, 2026-12-04).
// For set-up and test copies; the training step stages through pinned memory
// on its own stream.
inline void copy_to_device(void* device, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  TYPEFLOW_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
  TYPEFLOW_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}


// The floats from one row to the next for a kernel over rows of `width`:
// width when row_stride is 0, else row_stride, which may not be shorter
// (a GPU's tied_logits pads its rows: layers/embedding.hpp).
inline int row_stride_for(const char* what, int width, int row_stride) {
  if (row_stride == 0) return width;
  if (row_stride < width)
    throw std::invalid_argument(std::string("typeflow: ") + what + ": row_stride " + std::to_string(row_stride) +
                                " is shorter than a row of " + std::to_string(width));
  return row_stride;
}

// Device -> host on `stream`, not waited for: `rows` rows of `width` floats,
// `stride` floats apart on the device (a padded tied_logits head), packed
// on the host. One cudaMemcpy2DAsync; a plain copy when nothing is padded.
inline void copy_rows_to_host(float* host, const float* device, int rows, int width, int stride, cudaStream_t stream) {
  if (rows <= 0 || width <= 0) return;
  const std::size_t row_bytes = static_cast<std::size_t>(width) * sizeof(float);
  if (stride == width)
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(host, device, static_cast<std::size_t>(rows) * row_bytes,
                                        cudaMemcpyDeviceToHost, stream));
  else
    TYPEFLOW_CUDA_CHECK(cudaMemcpy2DAsync(host, row_bytes, device, static_cast<std::size_t>(stride) * sizeof(float),
                                          row_bytes, static_cast<std::size_t>(rows), cudaMemcpyDeviceToHost, stream));
}
// A stream's work recorded once and replayed: capture() runs `record` with the
// stream in capture mode (kernels and library calls are recorded, not run),
// then launch() replays the whole step as one graph.
class graph {
 public:
  graph() = default;
  ~graph() { reset(); }
  graph(const graph&) = delete;
  graph& operator=(const graph&) = delete;

  template <class Record>
  void capture(cudaStream_t s, Record&& record) {
    reset();
    TYPEFLOW_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    try {
      record(s);
    } catch (...) {
      cudaGraph_t abandoned = nullptr;
      (void)cudaStreamEndCapture(s, &abandoned);
      if (abandoned) (void)cudaGraphDestroy(abandoned);
      throw;
    }
    TYPEFLOW_CUDA_CHECK(cudaStreamEndCapture(s, &graph_));
    TYPEFLOW_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  bool captured() const noexcept { return exec_ != nullptr; }
  void launch(cudaStream_t s) const { TYPEFLOW_CUDA_CHECK(cudaGraphLaunch(exec_, s)); }
  void reset() noexcept {
    if (exec_) (void)cudaGraphExecDestroy(exec_);
    if (graph_) (void)cudaGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
  }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// Launch geometry for a grid-stride loop over n items.
inline unsigned blocks_for(std::size_t n, unsigned threads, unsigned most = 65535u * 4u) {
  const std::size_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b == 0 ? 1 : (b < most ? b : most));
}

}  // namespace typeflow::backend::cuda

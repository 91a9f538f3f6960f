// Memory bandwidth of the row kernels (backend/cuda/layer_norm.hpp and
// softmax_cross_entropy.hpp) on the GPU, against a device-to-device
// cudaMemcpyAsync moving the same number of bytes: the ceiling a row kernel
// that reads and writes each byte once can hope for.
//
//   layer_norm_fwd   (rows, features) = (8192, 768), (16384, 1024), (4096, 4096)
//   layer_norm_bwd   the same shapes: dx, dgamma and dbeta
//   softmax_xent     (rows, classes) = (8192, 50257), (65536, 1000): loss and d_logits
//   copy             cudaMemcpyAsync device to device of each case's bytes / 2
//                    (so that bytes read + written match)
//
// Timing: CUDA events around a batch of launches (UseManualTime: the Time column is a batch's,
// "us" one launch's). Counters: GB/s = bytes read + written per launch / time, where the
// bytes are what the kernels must move once (inputs read, outputs written,
// plus layer_norm backward's partial-sum workspace, written and read back);
// copy_GB/s the copy's rate for the same bytes; of_copy = GB/s / copy_GB/s.
// Re-reads that hit L2 (streamed rows, e.g. 50257 classes, read twice) are
// not counted, so of_copy is the fraction of the copy's rate achieved.
//
// Build (no CMake target yet):
//   nvcc -std=c++20 --expt-relaxed-constexpr -arch=sm_90 -O3 -Iinclude bench/gpu/norm_bench.cu -o norm_bench
//        -lbenchmark -lpthread
// Without a device it says so and exits 0.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "typeflow/backend/cuda/layer_norm.hpp"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/backend/cuda/softmax_cross_entropy.hpp"

namespace cu = typeflow::backend::cuda;

namespace {

// A pseudo-random float in [low, high) for index i (splitmix-style hash): data without a host round trip.
__global__ void fill_uniform(float* out, std::size_t n, float low, float high, std::uint32_t salt) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ salt;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    out[i] = low + (high - low) * static_cast<float>(h >> 40) * (1.f / 16777216.f);
  }
}

__global__ void fill_labels(std::int32_t* out, int n, int classes) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = static_cast<std::int32_t>((static_cast<std::uint64_t>(i) * 2654435761ull) % static_cast<std::uint64_t>(classes));
}

float* uniform_buffer(cu::device_buffer& b, std::size_t n, float low, float high, std::uint32_t salt, cudaStream_t s) {
  b = cu::device_buffer(n * sizeof(float));
  fill_uniform<<<cu::blocks_for(n, 256), 256, 0, s>>>(b.data<float>(), n, low, high, salt);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
  return b.data<float>();
}

// Launches per timed batch: about 5 ms of work at ~4 TB/s, at least 1.
int batch_for(double bytes) { return std::clamp(static_cast<int>(2e10 / bytes), 1, 100); }

// GB/s of a device-to-device copy whose read + written bytes are `bytes`; measured once per size.
double copy_rate(double bytes) {
  static std::map<double, double> measured;
  if (auto it = measured.find(bytes); it != measured.end()) return it->second;
  const std::size_t half = static_cast<std::size_t>(bytes / 2);
  cu::stream s;
  cu::device_buffer from(half), to(half);
  TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(from.data(), 1, half, s.get()));
  const int batch = batch_for(bytes);
  cu::event start(true), stop(true);
  for (int i = 0; i < 3; ++i) TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), half, cudaMemcpyDeviceToDevice, s.get()));
  float best_ms = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    start.record(s.get());
    for (int i = 0; i < batch; ++i)
      TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), half, cudaMemcpyDeviceToDevice, s.get()));
    stop.record(s.get());
    stop.synchronize();
    best_ms = std::min(best_ms, stop.milliseconds_since(start) / batch);
  }
  return measured[bytes] = 2.0 * static_cast<double>(half) / (best_ms * 1e-3) / 1e9;
}

// Times `launch` in batches between events; sets the batch's manual time and the counters.
template <class Launch>
void time_launches(benchmark::State& state, cudaStream_t s, double bytes, Launch&& launch, bool compare = true) {
  for (int i = 0; i < 3; ++i) launch(s);  // warm up: first-launch costs, L2 state
  TYPEFLOW_CUDA_CHECK(cudaStreamSynchronize(s));
  const int batch = batch_for(bytes);
  cu::event start(true), stop(true);
  double total_ms = 0;
  std::int64_t launches = 0;
  for (auto _ : state) {
    start.record(s);
    for (int i = 0; i < batch; ++i) launch(s);
    stop.record(s);
    stop.synchronize();
    const double ms = stop.milliseconds_since(start);
    state.SetIterationTime(ms * 1e-3);  // the batch: min_time then bounds the wall time
    total_ms += ms;
    launches += batch;
  }
  const double rate = bytes * static_cast<double>(launches) / (total_ms * 1e-3) / 1e9;
  state.counters["GB/s"] = rate;
  state.counters["us"] = total_ms * 1e3 / static_cast<double>(launches);  // one launch
  state.counters["MB"] = bytes / 1e6;
  if (compare) {
    const double copy = copy_rate(bytes);
    state.counters["copy_GB/s"] = copy;
    state.counters["of_copy"] = rate / copy;
  }
}

double layer_norm_forward_bytes(double rows, double features) {
  return 4.0 * (2 * rows * features + 2 * features + 2 * rows);  // x, gamma, beta in; y, mean, rstd out
}

double layer_norm_backward_bytes(int rows, int features) {
  const double r = rows, f = features;
  const double workspace = static_cast<double>(cu::layer_norm_backward_workspace_bytes(rows, features));
  // x, dy, gamma, mean, rstd in; dx, dgamma, dbeta out; the workspace written once and read once.
  return 4.0 * (3 * r * f + 3 * f + 2 * r) + 2 * workspace;
}

double xent_bytes(double rows, double classes) {
  return 4.0 * (2 * rows * classes + 2 * rows);  // logits, labels in; d_logits, row_loss out
}

void BM_layer_norm_fwd(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0)), features = static_cast<int>(state.range(1));
  const std::size_t count = static_cast<std::size_t>(rows) * features;
  cu::stream stream;
  cu::device_buffer x, gamma, beta, y(count * sizeof(float)), mean(rows * sizeof(float)), rstd(rows * sizeof(float));
  uniform_buffer(x, count, -2.f, 3.f, 1, stream.get());
  uniform_buffer(gamma, features, 0.5f, 1.5f, 2, stream.get());
  uniform_buffer(beta, features, -1.f, 1.f, 3, stream.get());
  time_launches(state, stream.get(), layer_norm_forward_bytes(rows, features), [&](cudaStream_t s) {
    cu::layer_norm_forward(x.data<float>(), gamma.data<float>(), beta.data<float>(), y.data<float>(),
                           mean.data<float>(), rstd.data<float>(), rows, features, 1e-5f, s);
  });
}

void BM_layer_norm_bwd(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0)), features = static_cast<int>(state.range(1));
  const std::size_t count = static_cast<std::size_t>(rows) * features;
  cu::stream stream;
  cu::device_buffer x, gamma, beta, dy, y(count * sizeof(float)), dx(count * sizeof(float)),
      mean(rows * sizeof(float)), rstd(rows * sizeof(float)), dgamma(features * sizeof(float)),
      dbeta(features * sizeof(float)), workspace(cu::layer_norm_backward_workspace_bytes(rows, features));
  uniform_buffer(x, count, -2.f, 3.f, 1, stream.get());
  uniform_buffer(gamma, features, 0.5f, 1.5f, 2, stream.get());
  uniform_buffer(beta, features, -1.f, 1.f, 3, stream.get());
  uniform_buffer(dy, count, -1.f, 1.f, 4, stream.get());
  cu::layer_norm_forward(x.data<float>(), gamma.data<float>(), beta.data<float>(), y.data<float>(), mean.data<float>(),
                         rstd.data<float>(), rows, features, 1e-5f, stream.get());
  state.counters["workspace_MB"] = static_cast<double>(workspace.size()) / 1e6;
  time_launches(state, stream.get(), layer_norm_backward_bytes(rows, features), [&](cudaStream_t s) {
    cu::layer_norm_backward(x.data<float>(), gamma.data<float>(), mean.data<float>(), rstd.data<float>(),
                            dy.data<float>(), dx.data<float>(), dgamma.data<float>(), dbeta.data<float>(), rows,
                            features, s, workspace.data<float>());
  });
}

void BM_softmax_xent(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0)), classes = static_cast<int>(state.range(1));
  const std::size_t count = static_cast<std::size_t>(rows) * classes;
  cu::stream stream;
  cu::device_buffer logits, labels(rows * sizeof(std::int32_t)), d_logits(count * sizeof(float)),
      loss(rows * sizeof(float));
  uniform_buffer(logits, count, -6.f, 6.f, 5, stream.get());
  fill_labels<<<cu::blocks_for(rows, 256), 256, 0, stream.get()>>>(labels.data<std::int32_t>(), rows, classes);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
  time_launches(state, stream.get(), xent_bytes(rows, classes), [&](cudaStream_t s) {
    cu::sparse_softmax_cross_entropy(logits.data<float>(), labels.data<std::int32_t>(), d_logits.data<float>(),
                                     loss.data<float>(), rows, classes, rows, 1.f, s);
  });
}

// The reference itself, at each case's byte count: arg 0 picks the case.
void BM_copy(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(1)), width = static_cast<int>(state.range(2));
  double bytes = 0;
  switch (state.range(0)) {
    case 0: bytes = layer_norm_forward_bytes(rows, width); break;
    case 1: bytes = layer_norm_backward_bytes(rows, width); break;
    default: bytes = xent_bytes(rows, width); break;
  }
  const std::size_t half = static_cast<std::size_t>(bytes / 2);
  cu::stream stream;
  cu::device_buffer from(half), to(half);
  TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(from.data(), 1, half, stream.get()));
  time_launches(
      state, stream.get(), 2.0 * static_cast<double>(half),
      [&](cudaStream_t s) {
        TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), half, cudaMemcpyDeviceToDevice, s));
      },
      false);
}

const char* const kCaseNames[] = {"layer_norm_fwd", "layer_norm_bwd", "softmax_xent"};

void layer_norm_shapes(benchmark::internal::Benchmark* b) {
  for (auto [rows, features] : {std::pair{8192, 768}, std::pair{16384, 1024}, std::pair{4096, 4096}})
    b->Args({rows, features});
  b->ArgNames({"rows", "features"});
}
void xent_shapes(benchmark::internal::Benchmark* b) {
  for (auto [rows, classes] : {std::pair{8192, 50257}, std::pair{65536, 1000}}) b->Args({rows, classes});
  b->ArgNames({"rows", "classes"});
}
void copy_shapes(benchmark::internal::Benchmark* b) {
  for (int which : {0, 1})
    for (auto [rows, features] : {std::pair{8192, 768}, std::pair{16384, 1024}, std::pair{4096, 4096}})
      b->Args({which, rows, features});
  for (auto [rows, classes] : {std::pair{8192, 50257}, std::pair{65536, 1000}}) b->Args({2, rows, classes});
  b->ArgNames({"bytes_of", "rows", "width"});  // bytes_of: 0 layer_norm_fwd, 1 layer_norm_bwd, 2 softmax_xent
}

}  // namespace

BENCHMARK(BM_layer_norm_fwd)->Apply(layer_norm_shapes)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_layer_norm_bwd)->Apply(layer_norm_shapes)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_softmax_xent)->Apply(xent_shapes)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_copy)->Apply(copy_shapes)->UseManualTime()->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  std::string why;
  if (cu::device_count(&why) == 0) {
    std::printf("norm_bench: no CUDA device (%s): nothing to measure. Run it on a GPU machine.\n", why.c_str());
    return 0;
  }
  cudaDeviceProp prop{};
  TYPEFLOW_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("norm_bench: %s, sm_%d%d, %.1f GiB; cases: %s, %s, %s and copy\n", prop.name, prop.major, prop.minor,
              static_cast<double>(prop.totalGlobalMem) / (1 << 30), kCaseNames[0], kCaseNames[1], kCaseNames[2]);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// GEMM throughput of typeflow::backend::cuda::matmul (cuBLASLt), against
// bench/gpu/torch_gemm.py's torch.matmul over the same sweep.
//
//   build/bench/gemm_bench [--benchmark_filter=bfloat16] [--benchmark_min_time=0.5]
//
// C (m, n) = A (m, k) · B (k, n), row-major, no epilogue. Precisions: float32
// (no TF32), tf32, bfloat16 and float16 with 16-bit C (as torch.matmul returns),
// all accumulating in fp32. Shapes: squares 512..8192 and MLP-like m×n×k
// 4096×4096×1024 and 8192×1024×4096. Time is GPU time between cudaEvents
// around a batch of back-to-back runs (enough to last ~1 ms at the small
// sizes); the Time column is a batch's, "ms" one GEMM's, and "TFLOP/s"
// counts 2·m·n·k per GEMM.
// copy/device_to_device/2GiB is the other ceiling: one cudaMemcpyAsync of
// 2 GiB, its "GB/s" counting bytes read plus bytes written.
// gemm/bfloat16/logits_{fwd,dX,dW}/ld{50257,50304}: GPT-2's tied head at
// 8192 rows as tied_logits makes its three products (bf16 operands, float32
// C), with the logits' rows 50257 floats apart as stored before, and 50304
// as a GPU's tied_logits now pads them (layers/embedding.hpp): what the
// padding gives, side by side in one run.
#include <benchmark/benchmark.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "typeflow/backend/cuda/matmul.hpp"
#include "typeflow/backend/cuda/runtime.hpp"

namespace cu = typeflow::backend::cuda;

namespace {

__device__ float uniform_at(std::uint64_t i, std::uint32_t seed) {
  // splitmix64: random-looking operands, since zeros would flatter the power draw.
  std::uint64_t z = i * 0x9E3779B97F4A7C15ull + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.f / 16777216.f) - 1.f;
}

__device__ void store(float* p, float v) { *p = v; }
__device__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <class T>
__global__ void fill_uniform(T* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    store(p + i, uniform_at(i, seed));
}

void fill(void* p, std::size_t n, cu::gemm_precision precision, std::uint32_t seed, cudaStream_t s) {
  const unsigned blocks = cu::blocks_for(n, 256);
  switch (precision) {
    case cu::gemm_precision::float32:
    case cu::gemm_precision::tf32: fill_uniform<<<blocks, 256, 0, s>>>(static_cast<float*>(p), n, seed); break;
    case cu::gemm_precision::float16: fill_uniform<<<blocks, 256, 0, s>>>(static_cast<__half*>(p), n, seed); break;
    case cu::gemm_precision::bfloat16:
      fill_uniform<<<blocks, 256, 0, s>>>(static_cast<__nv_bfloat16*>(p), n, seed);
      break;
  }
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

struct gemm_size {
  int m, n, k;
};
constexpr gemm_size sizes[] = {{512, 512, 512},       {1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 4096, 4096},
                               {8192, 8192, 8192},    {4096, 4096, 1024}, {8192, 1024, 4096}};
constexpr cu::gemm_precision precisions[] = {cu::gemm_precision::float32, cu::gemm_precision::tf32,
                                             cu::gemm_precision::bfloat16, cu::gemm_precision::float16};

// GPT-2's head (8192 rows, D 768, V 50257): tied_logits' three products,
// the logits' rows `ld` apart.
struct head_product {
  const char* name;
  typeflow::gemm_shape shape;
};
head_product head_products(int ld, int which) {
  constexpr int rows = 8192, dim = 768, vocab = 50257;
  switch (which) {
    case 0: return {"logits_fwd", {rows, vocab, dim, false, true, 0, 0, ld}};  // x · Eᵀ
    case 1: return {"logits_dX", {rows, dim, vocab, false, false, ld, 0, 0}};  // d_logits · E
    default: return {"logits_dW", {vocab, dim, rows, true, false, ld, 0, 0}};  // d_logitsᵀ · x
  }
}

// Elements of a stored operand: rows of its leading dimension (0: packed).
std::size_t stored(int rows, int columns, int ld) {
  return static_cast<std::size_t>(rows) * static_cast<std::size_t>(ld ? ld : columns);
}

void bench_gemm(benchmark::State& state, cublasLtHandle_t handle, cu::gemm_precision precision,
                typeflow::gemm_shape shape, bool output_16bit) {
  try {
    const bool sixteen = precision == cu::gemm_precision::float16 || precision == cu::gemm_precision::bfloat16;
    const std::size_t element = sixteen ? 2 : 4;
    const std::size_t m = shape.m, n = shape.n, k = shape.k;
    const cu::matmul mm(handle, shape, precision, cu::gemm_epilogue::none, output_16bit);
    const std::size_t a_count =
        shape.transpose_a ? stored(shape.k, shape.m, shape.lda) : stored(shape.m, shape.k, shape.lda);
    const std::size_t b_count =
        shape.transpose_b ? stored(shape.n, shape.k, shape.ldb) : stored(shape.k, shape.n, shape.ldb);
    cu::device_buffer a(a_count * element), b(b_count * element),
        c(stored(shape.m, shape.n, shape.ldc) * (output_16bit ? 2 : 4));
    cu::device_buffer workspace(mm.workspace_bytes());
    cu::stream stream;
    cu::event start(true), stop(true);
    fill(a.data(), a_count, precision, 1, stream.get());
    fill(b.data(), b_count, precision, 2, stream.get());

    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    // ~1 TFLOP per timed batch: about a millisecond at bf16 rates, so event
    // resolution and launch gaps stay small against the measured span.
    const int batch = static_cast<int>(std::clamp(1e12 / flops, 1.0, 100.0));
    auto run_batch = [&] {
      for (int r = 0; r < batch; ++r)
        mm.run(a.data(), b.data(), c.data(), nullptr, nullptr, workspace.data(), stream.get());
    };
    for (int warm = 0; warm < 3; ++warm) run_batch();  // clocks up, caches and lazy loading done
    stream.synchronize();

    double seconds = 0;
    std::int64_t gemms = 0;
    for (auto _ : state) {
      start.record(stream.get());
      run_batch();
      stop.record(stream.get());
      stop.synchronize();
      const double span = static_cast<double>(stop.milliseconds_since(start)) * 1e-3;
      state.SetIterationTime(span);  // the whole batch: min_time then bounds the wall time
      seconds += span;
      gemms += batch;
    }
    state.counters["TFLOP/s"] = gemms > 0 ? flops * static_cast<double>(gemms) / seconds * 1e-12 : 0.0;
    state.counters["ms"] = gemms > 0 ? seconds * 1e3 / static_cast<double>(gemms) : 0.0;
    state.counters["batch"] = batch;
    state.counters["workspace_MiB"] = static_cast<double>(mm.workspace_bytes()) / (1 << 20);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// The memory ceiling: 2 GiB copied device to device, 30 times the L2.
void bench_copy(benchmark::State& state) {
  try {
    const std::size_t bytes = std::size_t{2} << 30;
    cu::device_buffer from(bytes), to(bytes);
    cu::stream stream;
    cu::event start(true), stop(true);
    fill(from.data(), bytes / 4, cu::gemm_precision::float32, 3, stream.get());
    auto copy = [&] {
      TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()));
    };
    for (int warm = 0; warm < 2; ++warm) copy();
    stream.synchronize();
    double seconds = 0;
    std::int64_t copies = 0;
    for (auto _ : state) {
      start.record(stream.get());
      copy();
      stop.record(stream.get());
      stop.synchronize();
      const double span = static_cast<double>(stop.milliseconds_since(start)) * 1e-3;
      state.SetIterationTime(span);
      seconds += span;
      ++copies;
    }
    state.counters["GB/s"] = copies > 0 ? 2.0 * static_cast<double>(bytes) * static_cast<double>(copies) / seconds * 1e-9 : 0.0;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (cu::device_count(&why) == 0) {
    std::printf("gemm_bench: no CUDA device (%s); nothing to measure. Run it on a GPU machine.\n", why.c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) benchmark::AddCustomContext("device", prop.name);

  benchmark::RegisterBenchmark("copy/device_to_device/2GiB", bench_copy)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.3);
  cu::lt_handle handle;
  for (const auto precision : precisions)
    for (const auto& size : sizes) {
      const std::string name = std::string("gemm/") + cu::to_string(precision) + "/" + std::to_string(size.m) + "x" +
                               std::to_string(size.n) + "x" + std::to_string(size.k);
      const bool sixteen = precision == cu::gemm_precision::float16 || precision == cu::gemm_precision::bfloat16;
      typeflow::gemm_shape shape;
      shape.m = size.m;
      shape.n = size.n;
      shape.k = size.k;
      benchmark::RegisterBenchmark(name.c_str(), bench_gemm, handle.get(), precision, shape, sixteen)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.3);
    }
  for (int which = 0; which < 3; ++which)
    for (const int ld : {50257, 50304}) {
      const head_product p = head_products(ld, which);
      const std::string name = std::string("gemm/bfloat16/") + p.name + "/ld" + std::to_string(ld);
      benchmark::RegisterBenchmark(name.c_str(), bench_gemm, handle.get(), cu::gemm_precision::bfloat16, p.shape,
                                   /*output_16bit=*/false)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.3);
    }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

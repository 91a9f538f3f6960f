// How far cuBLASLt's first heuristic answer is from the fastest of its
// first 16, for the products a GPT-2 step makes and the squares of
// gemm_bench: whether timing the candidates once per shape (autotuning)
// would close the gap to torch.matmul that the GPU check measured
// (bench/gpu/NOTES.md, 2026-12-04: bf16 8192³ 679 TFLOP/s against 735).
//
//   build/bench/gemm_algos [candidates=16]
//
// bf16 operands, 16-bit C, fp32 accumulation, no epilogue, 32 MiB of
// workspace at most. Each candidate: 3 untimed runs, then the median of 15
// timed runs (each between two events), on random operands. Prints one line
// per candidate and a table last: the first answer's TFLOP/s, the best's,
// and which rank won. Without a device it says so and exits 0.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "typeflow/backend/cuda/matmul.hpp"
#include "typeflow/backend/cuda/runtime.hpp"

namespace cu = typeflow::backend::cuda;

namespace {

__global__ void fill_uniform(__nv_bfloat16* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint64_t z = i * 0x9E3779B97F4A7C15ull + seed;  // splitmix64: never zeros
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = __float2bfloat16_rn(static_cast<float>(z >> 40) * (2.f / 16777216.f) - 1.f);
  }
}

struct product {
  const char* name;
  int m, n, k;
  bool transpose_a = false, transpose_b = false;
};

// GPT-2 124M at 8 sequences of 1024 tokens (8192 rows), its vocabulary
// padded to 50304; the backward products as the dense layer makes them:
// dX = dY · Wᵀ (B transposed), dW = Xᵀ · dY (A transposed).
const product products[] = {
    {"square 2048", 2048, 2048, 2048},
    {"square 4096", 4096, 4096, 4096},
    {"square 8192", 8192, 8192, 8192},
    {"qkv fwd", 8192, 2304, 768},
    {"qkv dX", 8192, 768, 2304, false, true},
    {"qkv dW", 768, 2304, 8192, true, false},
    {"attn proj fwd", 8192, 768, 768},
    {"mlp fc fwd", 8192, 3072, 768},
    {"mlp fc dX", 8192, 768, 3072, false, true},
    {"mlp fc dW", 768, 3072, 8192, true, false},
    {"mlp proj fwd", 8192, 768, 3072},
    {"logits fwd", 8192, 50304, 768, false, true},  // tied: the embedding (V, D) as Bᵀ
    {"logits dX", 8192, 768, 50304},
    {"logits dW", 50304, 768, 8192, true, false},
};

// One product's outcome. (At namespace scope: nvcc 13.0's front end aborts
// on a std::vector of a struct local to main.)
struct row {
  const char* name;
  double first, best;
  int best_rank, tried;
};

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (cu::device_count(&why) == 0) {
    std::printf("gemm_algos: no CUDA device (%s); nothing to measure. Run it on a GPU machine.\n", why.c_str());
    return 0;
  }
  const int count = argc > 1 ? std::atoi(argv[1]) : 16;
  cu::lt_handle handle;
  cu::stream stream;
  cu::event start(true), stop(true);
  cu::device_buffer workspace(std::size_t{32} << 20);
  std::vector<row> rows;
  for (const product& p : products) {
    try {
      typeflow::gemm_shape shape;
      shape.m = p.m;
      shape.n = p.n;
      shape.k = p.k;
      shape.transpose_a = p.transpose_a;
      shape.transpose_b = p.transpose_b;
      cu::matmul mm(handle.get(), shape, cu::gemm_precision::bfloat16, cu::gemm_epilogue::none, /*output_16bit=*/true);
      const std::size_t m = p.m, n = p.n, k = p.k;
      cu::device_buffer a(m * k * 2), b(k * n * 2), c(m * n * 2);
      fill_uniform<<<cu::blocks_for(m * k, 256), 256, 0, stream.get()>>>(a.data<__nv_bfloat16>(), m * k, 1);
      fill_uniform<<<cu::blocks_for(k * n, 256), 256, 0, stream.get()>>>(b.data<__nv_bfloat16>(), k * n, 2);
      TYPEFLOW_CUDA_CHECK_LAUNCH();
      const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
      const auto candidates = mm.candidates(count, workspace.size());
      row r{p.name, 0, 0, -1, static_cast<int>(candidates.size())};
      for (std::size_t rank = 0; rank < candidates.size(); ++rank) {
        mm.use(candidates[rank]);
        std::vector<float> ms;
        try {
          for (int i = 0; i < 3; ++i) mm.run(a.data(), b.data(), c.data(), nullptr, nullptr, workspace.data(), stream.get());
          for (int i = 0; i < 15; ++i) {
            start.record(stream.get());
            mm.run(a.data(), b.data(), c.data(), nullptr, nullptr, workspace.data(), stream.get());
            stop.record(stream.get());
            stop.synchronize();
            ms.push_back(stop.milliseconds_since(start));
          }
        } catch (const std::exception& e) {
          std::printf("%-14s rank %2zu: failed: %s\n", p.name, rank, e.what());
          continue;
        }
        const double tflops = flops / (median(ms) * 1e-3) * 1e-12;
        std::printf("%-14s %5dx%5dx%5d rank %2zu: %7.1f TFLOP/s  %.4f ms  workspace %6.2f MiB  waves %.2f\n", p.name,
                    p.m, p.n, p.k, rank, tflops, median(ms), static_cast<double>(candidates[rank].workspace_bytes) / (1 << 20),
                    static_cast<double>(candidates[rank].waves));
        if (rank == 0) r.first = tflops;
        if (tflops > r.best) r.best = tflops, r.best_rank = static_cast<int>(rank);
      }
      rows.push_back(r);
    } catch (const std::exception& e) {
      std::printf("%-14s failed: %s\n", p.name, e.what());
    }
    std::fflush(stdout);
  }
  std::printf("\n%-14s %10s %10s %6s %6s %6s\n", "product", "first", "best", "ratio", "rank", "tried");
  for (const row& r : rows)
    std::printf("%-14s %10.1f %10.1f %6.3f %6d %6d\n", r.name, r.first, r.best, r.first > 0 ? r.best / r.first : 0.0,
                r.best_rank, r.tried);
  return 0;
}

// The machine's arithmetic peak for the benchmarks: typeflow's own probe
// (backend/cpu/peak_flops.hpp, the denominator of fit's MFU), float32 FMAs and,
// where the CPU has AVX512-BF16, vdpbf16ps, on every OpenMP thread. The
// benchmarks print it first, and each step's GFLOP/s as a share of it
// ("of_peak"), so that a figure reads as a fraction of what the cores can do.
#pragma once

#include <cstdio>
#include <string>

#include <omp.h>

#include <typeflow/backend/cpu/peak_flops.hpp>

namespace typeflow_bench {

struct fma_peak {
  double float32_gflops = 0;
  double bf16_gflops = 0;  // 0 where the CPU has no bf16 dot product
  // The peak a policy's products run at: bf16's under mixed_bfloat16 where
  // the CPU has it, float32's otherwise.
  double for_policy(const std::string& policy) const {
    return policy == "mixed_bfloat16" && bf16_gflops > 0 ? bf16_gflops : float32_gflops;
  }
};

// Measured once per process (main() asks first, so that no benchmark's
// timing includes the probe).
inline const fma_peak& machine_fma_peak() {
  static const fma_peak peak{typeflow::cpu_peak_flops() / 1e9, typeflow::cpu_bf16_peak_flops() / 1e9};
  return peak;
}

// One line, "fma_peak float32_gflops=... bf16_gflops=... threads=N", to
// `to` (stderr where stdout carries Google Benchmark's JSON).
inline void print_fma_peak(const fma_peak& peak, std::FILE* to = stdout) {
  std::fprintf(to, "fma_peak float32_gflops=%.1f bf16_gflops=%.1f threads=%d\n", peak.float32_gflops,
               peak.bf16_gflops, omp_get_max_threads());
}

}  // namespace typeflow_bench

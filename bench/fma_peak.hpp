// The machine's arithmetic peak, measured rather than looked up: a short
// probe (about 0.2 s) that runs independent vector FMAs on every OpenMP
// thread, and, where the CPU has AVX512-BF16, vdpbf16ps (a bf16 dot product
// into float32, what oneDNN's bf16 matmul runs on). The benchmarks print
// it beside each step's GFLOP/s, and the step's share of it ("of_peak"), so
// a figure reads as a fraction of what the cores can do.
//
//   const fma_peak peak = measure_fma_peak();
//   peak.float32_gflops   float32 FMAs (2 flops each lane), all threads
//   peak.bf16_gflops      vdpbf16ps (2 flops per bf16 pair), 0 where absent
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include <immintrin.h>
#include <omp.h>

namespace typeflow_bench {

struct fma_peak {
  double float32_gflops = 0;
  double bf16_gflops = 0;
  // The peak a policy's products run at: bf16's under mixed_bfloat16 where
  // the CPU has it, float32's otherwise.
  double for_policy(const std::string& policy) const {
    return policy == "mixed_bfloat16" && bf16_gflops > 0 ? bf16_gflops : float32_gflops;
  }
};

namespace detail {

// Independent chains hide the FMA latency; how many a core needs (and how
// many its registers hold) differs between CPUs, so the probe tries a few
// counts and keeps the fastest.
inline constexpr long iterations = 1 << 21;

// Flops one thread did in `iterations` rounds of `chains` float32 FMAs.
template <int chains>
inline double float32_round(volatile float* sink) {
#if defined(__AVX512F__)
  __m512 acc[chains];
  for (int c = 0; c < chains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-6f);
  for (long i = 0; i < iterations; ++i)
#pragma GCC unroll 32
    for (int c = 0; c < chains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  for (int c = 1; c < chains; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
  *sink = _mm512_reduce_add_ps(acc[0]);
  return 2.0 * 16 * chains * iterations;
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 acc[chains];
  for (int c = 0; c < chains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-6f);
  for (long i = 0; i < iterations; ++i)
#pragma GCC unroll 32
    for (int c = 0; c < chains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  for (int c = 1; c < chains; ++c) acc[0] = _mm256_add_ps(acc[0], acc[c]);
  float lanes[8];
  _mm256_storeu_ps(lanes, acc[0]);
  *sink = lanes[0];
  return 2.0 * 8 * chains * iterations;
#else
  *sink = 0;
  return 0;
#endif
}

// The same with vdpbf16ps: 32 bf16 pairs into 16 float32 lanes each.
template <int chains>
inline double bf16_round(volatile float* sink) {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  __m512 acc[chains];
  for (int c = 0; c < chains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  for (long i = 0; i < iterations; ++i)
#pragma GCC unroll 32
    for (int c = 0; c < chains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, a);
  for (int c = 1; c < chains; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
  *sink = _mm512_reduce_add_ps(acc[0]);
  return 2.0 * 32 * chains * iterations;
#else
  *sink = 0;
  return 0;
#endif
}

// Flops per second over all threads, each running `round` once.
template <class Round>
double on_all_threads(Round round) {
  double flops = 0;
  float sinks[256] = {};
  const auto start = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : flops)
  flops += round(&sinks[omp_get_thread_num() % 256]);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return seconds > 0 ? flops / seconds : 0;
}

}  // namespace detail

inline fma_peak measure_fma_peak() {
  fma_peak peak;
  detail::on_all_threads(detail::float32_round<8>);  // wakes the threads and the clocks
  for (double rate : {detail::on_all_threads(detail::float32_round<8>), detail::on_all_threads(detail::float32_round<12>),
                      detail::on_all_threads(detail::float32_round<16>)})
    peak.float32_gflops = std::max(peak.float32_gflops, rate / 1e9);
  for (double rate : {detail::on_all_threads(detail::bf16_round<8>), detail::on_all_threads(detail::bf16_round<12>),
                      detail::on_all_threads(detail::bf16_round<16>)})
    peak.bf16_gflops = std::max(peak.bf16_gflops, rate / 1e9);
  return peak;
}

// Measured once per process, on first use (main() calls it before the
// benchmarks, so that no benchmark's timing includes the probe).
inline const fma_peak& machine_fma_peak() {
  static const fma_peak peak = measure_fma_peak();
  return peak;
}

// One line, "fma_peak float32_gflops=... bf16_gflops=... threads=N", to
// `to` (stderr where stdout carries Google Benchmark's JSON).
inline void print_fma_peak(const fma_peak& peak, std::FILE* to = stdout) {
  std::fprintf(to, "fma_peak float32_gflops=%.1f bf16_gflops=%.1f threads=%d\n", peak.float32_gflops,
               peak.bf16_gflops, omp_get_max_threads());
}

}  // namespace typeflow_bench

// cpu_peak_flops(): the CPU's peak float32 FLOP/s as this process can use it,
// measured once by a short FMA probe; the denominator of MFU (model FLOPs
// utilisation) in fit's logs.
//
//   MFU = (training FLOPs of a step: 3 x the network's forward FLOPs per sample
//          x the batch, a multiply-add counted as two) / (the step's measured
//          time) / (peak FLOP/s)
//
// The probe runs on every OpenMP thread at once (omp_get_max_threads(), the
// threads the model's kernels use), each thread updating 12 independent
// registers (16 too with AVX-512) of fused multiply-adds for a few million
// instructions: AVX-512 where the CPU has it, else AVX2 with FMA, else plain
// float arithmetic. cpu_bf16_peak_flops() does the same with vdpbf16ps
// where the CPU has AVX512-BF16 (0 elsewhere).
// Each thread's rate is its FLOPs over its own CPU time (see
// measure_cpu_peak_flops), and the sum over threads, best of three runs, is
// the peak. Give fit_options::peak_flops to use a datasheet's figure instead.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>

#include <omp.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TYPEFLOW_PEAK_FLOPS_X86 1
#endif

namespace typeflow {

// The CPU time the calling thread has run, in seconds, or its wall-clock time
// where the system cannot tell.
inline double thread_cpu_seconds() {
#if defined(CLOCK_THREAD_CPUTIME_ID)
  timespec now{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now) == 0) return static_cast<double>(now.tv_sec) + now.tv_nsec * 1e-9;
#endif
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace detail {

// Independent chains, enough to cover the FMA latency. The inner loops are
// unrolled so that the chains stay in registers: rolled, g++ -O2 kept them
// on the stack, and the store-to-load forwarding of each update halved the
// measured peak (64 instead of 110+ GFLOP/s a core here; MFU read over 100%).
// How many chains a core needs differs: 12 fill an AVX2 core's two FMA
// pipes, an AMD Zen 5 (two 512-bit pipes) needs 16 (12 gave 103 GFLOP/s a
// core there, 16 gave 192, and oneDNN's matmul ran at 174); AVX-512 tries
// both and keeps the faster (32 registers hold 16 chains and the operands).
constexpr int fma_chains = 12;
constexpr int fma_chains_wide = 16;

#if defined(TYPEFLOW_PEAK_FLOPS_X86)
template <int Chains>
__attribute__((target("avx512f"))) inline float fma_probe_avx512(std::int64_t iterations, float seed) {
  __m512 acc[Chains];
  for (int i = 0; i < Chains; ++i) acc[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-6f);
  for (std::int64_t n = 0; n < iterations; ++n)
#pragma GCC unroll 16
    for (int i = 0; i < Chains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 sum = acc[0];
  for (int i = 1; i < Chains; ++i) sum = _mm512_add_ps(sum, acc[i]);
  float lanes[16];
  _mm512_storeu_ps(lanes, sum);
  return lanes[0] + lanes[15];
}
__attribute__((target("avx2,fma"))) inline float fma_probe_avx2(std::int64_t iterations, float seed) {
  __m256 acc[fma_chains];
  for (int i = 0; i < fma_chains; ++i) acc[i] = _mm256_set1_ps(seed + static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-6f);
  for (std::int64_t n = 0; n < iterations; ++n)
#pragma GCC unroll 12
    for (int i = 0; i < fma_chains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  __m256 sum = acc[0];
  for (int i = 1; i < fma_chains; ++i) sum = _mm256_add_ps(sum, acc[i]);
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  return lanes[0] + lanes[7];
}
// vdpbf16ps, what oneDNN's bf16 matmul runs on: 32 bf16 pairs into 16
// float32 lanes, 64 FLOPs an instruction.
__attribute__((target("avx512f,avx512bf16"))) inline float bf16_probe_avx512(std::int64_t iterations, float seed) {
  __m512 acc[fma_chains_wide];
  for (int i = 0; i < fma_chains_wide; ++i) acc[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  for (std::int64_t n = 0; n < iterations; ++n)
#pragma GCC unroll 16
    for (int i = 0; i < fma_chains_wide; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, a);
  __m512 sum = acc[0];
  for (int i = 1; i < fma_chains_wide; ++i) sum = _mm512_add_ps(sum, acc[i]);
  float lanes[16];
  _mm512_storeu_ps(lanes, sum);
  return lanes[0] + lanes[15];
}
#endif

inline float fma_probe_scalar(std::int64_t iterations, float seed) {
  float acc[fma_chains];
  for (int i = 0; i < fma_chains; ++i) acc[i] = seed + static_cast<float>(i);
  for (std::int64_t n = 0; n < iterations; ++n)
#pragma GCC unroll 12
    for (int i = 0; i < fma_chains; ++i) acc[i] = acc[i] * 0.999999f + 1e-6f;
  float sum = 0;
  for (float v : acc) sum += v;
  return sum;
}

// FLOPs of one iteration of the probe this CPU runs: lanes x chains x 2.
inline int fma_probe_lanes() {
#if defined(TYPEFLOW_PEAK_FLOPS_X86)
  if (__builtin_cpu_supports("avx512f")) return 16;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 8;
#endif
  return 1;
}

inline float fma_probe(int lanes, int chains, std::int64_t iterations, float seed) {
#if defined(TYPEFLOW_PEAK_FLOPS_X86)
  if (lanes == 16)
    return chains == fma_chains_wide ? fma_probe_avx512<fma_chains_wide>(iterations, seed)
                                     : fma_probe_avx512<fma_chains>(iterations, seed);
  if (lanes == 8) return fma_probe_avx2(iterations, seed);
#endif
  return fma_probe_scalar(iterations, seed);
}

inline bool has_bf16_dot_product() {
#if defined(TYPEFLOW_PEAK_FLOPS_X86)
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

// FLOP/s summed over the OpenMP threads, best of three runs of
// probe(iterations, seed), which does flops_per_thread FLOPs.
template <class Probe>
double probe_all_threads(Probe probe, std::int64_t iterations, double flops_per_thread) {
  double best = 0;
  volatile float sink = 0;  // keeps the probe's result, so that it is computed
  for (int attempt = 0; attempt < 3; ++attempt) {
    double total = 0;  // FLOP/s, summed over the threads
#pragma omp parallel reduction(+ : total)
    {
      const double start = thread_cpu_seconds();
      const float result = probe(iterations, static_cast<float>(omp_get_thread_num()));
      const double seconds = thread_cpu_seconds() - start;
      if (seconds > 0) total += flops_per_thread / seconds;
#pragma omp critical
      sink = sink + result;
    }
    best = std::max(best, total);
  }
  return best;
}

}  // namespace detail

// Measures now (a few tens of milliseconds on every OpenMP thread); FLOP/s.
// Each thread times itself by its own CPU time, so a thread that the system
// preempts for another process (a shared machine, a build next door) still
// measures its core's rate, while two threads on one core's hyperthreads each
// measure half of it: the sum is what the model's threads could do at best.
inline double measure_cpu_peak_flops(std::int64_t iterations_per_thread = 2'000'000) {
  const int lanes = detail::fma_probe_lanes();
  const std::int64_t iterations = lanes == 1 ? iterations_per_thread / 8 : iterations_per_thread;
  double best = 0;
  for (int chains : {detail::fma_chains, detail::fma_chains_wide}) {
    if (chains != detail::fma_chains && lanes != 16) continue;  // only AVX-512 has the registers
    best = std::max(best, detail::probe_all_threads(
                              [&](std::int64_t n, float seed) { return detail::fma_probe(lanes, chains, n, seed); },
                              iterations, 2.0 * lanes * chains * static_cast<double>(iterations)));
  }
  return best;
}

// The same for bf16 dot products into float32 (vdpbf16ps: the peak of the
// CPU's native bf16 products, backend/cpu/products_16bit.hpp); 0 where the
// CPU has no AVX512-BF16.
inline double measure_cpu_bf16_peak_flops(std::int64_t iterations_per_thread = 2'000'000) {
#if defined(TYPEFLOW_PEAK_FLOPS_X86)
  if (!detail::has_bf16_dot_product()) return 0;
  return detail::probe_all_threads(detail::bf16_probe_avx512, iterations_per_thread,
                                   64.0 * detail::fma_chains_wide * static_cast<double>(iterations_per_thread));
#else
  (void)iterations_per_thread;
  return 0;
#endif
}

// Measured once per process, on first use.
inline double cpu_peak_flops() {
  static const double peak = measure_cpu_peak_flops();
  return peak;
}
inline double cpu_bf16_peak_flops() {
  static const double peak = measure_cpu_bf16_peak_flops();
  return peak;
}

}  // namespace typeflow

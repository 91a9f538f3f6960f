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
// registers of fused multiply-adds for a few million instructions: AVX-512
// where the CPU has it, else AVX2 with FMA, else plain float arithmetic.
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

namespace detail {

// Independent chains, enough to cover the FMA latency. The inner loops are
// unrolled so that the chains stay in registers: rolled, g++ -O2 kept them
// on the stack, and the store-to-load forwarding of each update halved the
// measured peak (64 instead of 110+ GFLOP/s a core here; MFU read over 100%).
constexpr int fma_chains = 12;

#if defined(TYPEFLOW_PEAK_FLOPS_X86)
__attribute__((target("avx512f"))) inline float fma_probe_avx512(std::int64_t iterations, float seed) {
  __m512 acc[fma_chains];
  for (int i = 0; i < fma_chains; ++i) acc[i] = _mm512_set1_ps(seed + static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-6f);
  for (std::int64_t n = 0; n < iterations; ++n)
#pragma GCC unroll 12
    for (int i = 0; i < fma_chains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 sum = acc[0];
  for (int i = 1; i < fma_chains; ++i) sum = _mm512_add_ps(sum, acc[i]);
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

inline float fma_probe(int lanes, std::int64_t iterations, float seed) {
#if defined(TYPEFLOW_PEAK_FLOPS_X86)
  if (lanes == 16) return fma_probe_avx512(iterations, seed);
  if (lanes == 8) return fma_probe_avx2(iterations, seed);
#endif
  return fma_probe_scalar(iterations, seed);
}

}  // namespace detail

// The CPU time the calling thread has run, in seconds, or its wall-clock time
// where the system cannot tell.
inline double thread_cpu_seconds() {
#if defined(CLOCK_THREAD_CPUTIME_ID)
  timespec now{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now) == 0) return static_cast<double>(now.tv_sec) + now.tv_nsec * 1e-9;
#endif
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Measures now (a few tens of milliseconds on every OpenMP thread); FLOP/s.
// Each thread times itself by its own CPU time, so a thread that the system
// preempts for another process (a shared machine, a build next door) still
// measures its core's rate, while two threads on one core's hyperthreads each
// measure half of it: the sum is what the model's threads could do at best.
inline double measure_cpu_peak_flops(std::int64_t iterations_per_thread = 2'000'000) {
  const int lanes = detail::fma_probe_lanes();
  const std::int64_t iterations = lanes == 1 ? iterations_per_thread / 8 : iterations_per_thread;
  const double flops_per_thread = 2.0 * lanes * detail::fma_chains * static_cast<double>(iterations);
  double best = 0;
  volatile float sink = 0;  // keeps the probe's result, so that it is computed
  for (int attempt = 0; attempt < 3; ++attempt) {
    double total = 0;  // FLOP/s, summed over the threads
#pragma omp parallel reduction(+ : total)
    {
      const double start = thread_cpu_seconds();
      const float result = detail::fma_probe(lanes, iterations, static_cast<float>(omp_get_thread_num()));
      const double seconds = thread_cpu_seconds() - start;
      if (seconds > 0) total += flops_per_thread / seconds;
#pragma omp critical
      sink = sink + result;
    }
    best = std::max(best, total);
  }
  return best;
}

// Measured once per process, on first use.
inline double cpu_peak_flops() {
  static const double peak = measure_cpu_peak_flops();
  return peak;
}

}  // namespace typeflow

// A strategy: how many replicas train one model, here and across processes.
//
//   single_device      one replica                    (distribute/single_device.hpp)
//   mirrored<N>        N in one process: threads on the CPU, GPUs on CUDA
//                                                      (distribute/mirrored.hpp)
//   multi_worker       one per MPI process            (distribute/multi_worker.hpp)
//
// Every strategy states the same facts and offers the same process-level
// collectives, so that an engine asks nothing about which one it has:
//
//   static constexpr int replicas;           // replicas in this process
//   static constexpr bool across_processes;  // processes train together (MPI, NCCL)
//   static constexpr bool sync_statistics;   // batch_norm's moving statistics averaged
//   static std::string name();               // as checkpoints record it
//   int rank() const; bool is_chief() const; // this process's place (0 and true alone)
//   void broadcast(float*, std::size_t) const;        // rank 0's values everywhere
//   void all_reduce_mean(float*, std::size_t) const;  // the mean over the processes
//
// Within a process the replicas' own algorithm is the device's:
// train/cpu_replicas.hpp and distribute/cuda_replicas.hpp.
#pragma once

#include <concepts>
#include <cstddef>
#include <string>

namespace typeflow {

template <class S>
concept strategy = requires(const S& s, float* data, std::size_t n) {
  { S::replicas } -> std::convertible_to<int>;
  { S::across_processes } -> std::convertible_to<bool>;
  { S::sync_statistics } -> std::convertible_to<bool>;
  { S::name() } -> std::convertible_to<std::string>;
  { s.rank() } -> std::convertible_to<int>;
  { s.is_chief() } -> std::convertible_to<bool>;
  s.broadcast(data, n);
  s.all_reduce_mean(data, n);
};

namespace distribute {

// Whether `ok` holds in every process: one verdict that all take alike
// (a loss that is not finite in one process refuses the update in all).
// multi_worker's all_agree names the operation when a worker fails; any
// other strategy answers through its all_reduce_mean.
template <strategy S>
bool in_every_process(const S& s, bool ok, const char* operation) {
  if constexpr (requires { s.all_agree(ok, operation); }) {
    return s.all_agree(ok, operation);
  } else {
    float refused = ok ? 0.f : 1.f;
    s.all_reduce_mean(&refused, 1);
    return refused == 0.f;
  }
}

// The process-level half of a strategy that runs in one process: its only
// process is rank 0, and the collectives have nothing to do.
struct one_process {
  static constexpr bool across_processes = false;
  static int rank() noexcept { return 0; }
  static bool is_chief() noexcept { return true; }
  static void broadcast(float*, std::size_t) noexcept {}
  static void all_reduce_mean(float*, std::size_t) noexcept {}
};

}  // namespace distribute
}  // namespace typeflow

// The dropout seeds of data-parallel copies of one model, written once for
// every device and strategy: each copy draws its own masks, and the same
// model seed gives the same masks on the CPU and on GPUs.
//
//   worker_seed(seed, rank)      replica 0 of worker `rank` (multi_worker)
//   replica_seed(seed, replica)  replica `replica` of one process (mirrored<N>),
//                                from its process's worker_seed
//
// Rank 0 and replica 0 keep the model's seed, so one device alone draws the
// masks single_device does.
#pragma once

#include <cstdint>

#include "typeflow/core/random.hpp"

namespace typeflow::distribute {

constexpr std::uint64_t worker_seed(std::uint64_t seed, int rank) {
  return rank == 0 ? seed : mix_seed(seed, 0x3C0A1u + static_cast<std::uint64_t>(rank));
}

constexpr std::uint64_t replica_seed(std::uint64_t seed, int replica) {
  return replica == 0 ? seed : mix_seed(seed, 0x5EB1CAu + static_cast<std::uint64_t>(replica));
}

}  // namespace typeflow::distribute

// A strategy of the tests' own that crosses processes, offering only what the
// strategy concept asks (distribute/strategy.hpp): no shard collectives. The
// compile-fail tests of zero<k> across processes use it, since multi_worker
// needs MPI's headers.
#pragma once

#include <cstddef>
#include <string>

struct two_processes {
  static constexpr int replicas = 1;
  static constexpr bool across_processes = true;
  static constexpr bool sync_statistics = false;
  static std::string name() { return "two_processes"; }
  int rank() const { return 0; }
  bool is_chief() const { return true; }
  void broadcast(float*, std::size_t) const {}
  void all_reduce_mean(float*, std::size_t) const {}
};

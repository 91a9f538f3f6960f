// Strategies: how many replicas train one model. single_device is one;
// mirrored<N> (distribute/mirrored.hpp) runs N in threads, multi_worker
// (distribute/multi_worker.hpp) one per MPI process.
#pragma once

#include <string>

namespace typeflow {

struct single_device {
  static constexpr int replicas = 1;
  static std::string name() { return "single_device"; }
};

}  // namespace typeflow

// Strategies: how many replicas train one model. single_device is one;
// mirrored<N> (distribute/mirrored.hpp) runs N in threads, multi_worker
// (distribute/multi_worker.hpp) one per MPI process.
#pragma once

namespace typeflow {

struct single_device {
  static constexpr int replicas = 1;
};

}  // namespace typeflow

// Strategies: how many replicas train one model. single_device is one.
// (mirrored<N> and multi_worker arrive with the scale-out work.)
#pragma once

namespace typeflow {

struct single_device {
  static constexpr int replicas = 1;
};

}  // namespace typeflow

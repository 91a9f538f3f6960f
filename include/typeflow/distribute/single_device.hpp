// single_device: one replica in one process (distribute/strategy.hpp lists
// the strategies).
#pragma once

#include <string>

#include "typeflow/distribute/strategy.hpp"

namespace typeflow {

struct single_device : distribute::one_process {
  static constexpr int replicas = 1;
  static constexpr bool sync_statistics = false;
  static std::string name() { return "single_device"; }
};

}  // namespace typeflow

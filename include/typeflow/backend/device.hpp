// Devices a model runs on. cpu: oneDNN and OpenMP. (cuda arrives with the
// CUDA backend.)
#pragma once

namespace typeflow {

struct cpu {
  static constexpr const char* name = "cpu";
};

}  // namespace typeflow

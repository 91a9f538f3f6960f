// The check the CUDA model tests end with: a model trained on the GPU and
// the same model on the CPU (same seed, same batches) give the same losses,
// each within `tolerance` (relative), and the GPU's model learns.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

namespace cuda_test {

// gpu, cpu: a loss per epoch or step, in order; `learned`: the index whose
// loss must lie below the first's.
inline void check_losses_agree(const std::vector<double>& gpu, const std::vector<double>& cpu, double tolerance,
                               std::size_t learned) {
  REQUIRE(gpu.size() == cpu.size());
  REQUIRE(learned < gpu.size());
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    INFO("loss " << i + 1 << " of " << cpu.size() << ": gpu " << gpu[i] << ", cpu " << cpu[i]);
    CHECK(gpu[i] == doctest::Approx(cpu[i]).epsilon(tolerance));
  }
  CHECK(gpu[learned] < gpu[0]);  // it learns
}

}  // namespace cuda_test

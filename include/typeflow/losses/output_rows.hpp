// What a loss per output (train/output_losses.hpp) does with an output's
// rows once its loss has run, one call per sample, on either device (the
// CPU's loop; on CUDA for_each_index, compiled in the kernel library,
// src/cuda/for_each_index.cu): the sample's loss gains the output's, its
// weight times the mean of its per_sample rows (so that the mean over the
// samples is the output's mean loss).
#pragma once

#include <cstddef>

#include "typeflow/core/host_device.hpp"

namespace typeflow::losses {

struct add_weighted_row_mean {
  const float* rows;  // (samples, per_sample): the output's row losses
  float* total;       // (samples): each sample's loss so far
  std::size_t per_sample;
  float weight;
  TYPEFLOW_HOST_DEVICE void operator()(std::size_t r) const {
    float sum = 0.f;
    for (std::size_t q = 0; q < per_sample; ++q) sum += rows[r * per_sample + q];
    total[r] += weight * sum / static_cast<float>(per_sample);
  }
};

}  // namespace typeflow::losses

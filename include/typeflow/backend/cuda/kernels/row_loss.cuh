// The kernel of backend/cuda/losses.hpp's row_loss: a dense-target loss's
// `row` (losses/losses.hpp), one thread per row. src/cuda/losses.cu
// instantiates it, once, for the losses backend/cuda/losses.hpp lists.
//
// A thread per row keeps the arithmetic the CPU runs (apply_rows) to the
// bit; it suits the regression and few-class rows these losses take. The
// language-model loss is sparse and has its fused kernels
// (softmax_cross_entropy.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "typeflow/backend/cuda/losses.hpp"
#include "typeflow/backend/cuda/runtime.hpp"

namespace typeflow::backend::cuda {

namespace detail {
template <class Loss>
__global__ void row_loss_kernel(Loss loss, const float* out, const float* targets, float* d_out, float* row_loss,
                                int rows, int width, int valid_rows, float scale) {
  const int r = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (r >= rows) return;
  const std::size_t at = static_cast<std::size_t>(r) * static_cast<std::size_t>(width);
  float* g = d_out + at;
  if (r >= valid_rows) {
    for (int j = 0; j < width; ++j) g[j] = 0.f;
    row_loss[r] = 0.f;
    return;
  }
  row_loss[r] = loss.row(out + at, targets + at, width, scale, g);
}
}  // namespace detail

template <class Loss>
void row_loss(const Loss& loss, const float* outputs, const float* targets, float* d_outputs, float* row_losses,
              int rows, int width, int valid_rows, float gradient_scale, cudaStream_t stream) {
  check_loss_rows("row_loss", rows, width, valid_rows);
  if (rows == 0) return;
  constexpr int threads = 128;
  const float scale = Loss::gradient_scale(valid_rows, width) * gradient_scale;
  detail::row_loss_kernel<<<static_cast<unsigned>((rows + threads - 1) / threads), threads, 0, stream>>>(
      loss, outputs, targets, d_outputs, row_losses, rows, width, valid_rows, scale);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace typeflow::backend::cuda

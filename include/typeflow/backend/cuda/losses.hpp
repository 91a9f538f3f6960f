// The losses on the GPU: each loss's executor for tf::cuda, as the CPU's is
// train/compile_holders.hpp's loss_holder. The engine calls one interface,
// device_loss_base::record, for whichever loss compile() was given:
//
//   sparse_categorical_crossentropy   the fused softmax + cross-entropy kernels
//                                     (softmax_cross_entropy.hpp), logits or
//                                     probabilities, int32 class ids
//   the dense-target losses listed    their `row` (losses/losses.hpp), the same
//   in device_row_losses              code the CPU runs, one thread per row
//                                     (kernels/row_loss.cuh), float targets
//
// To give a new dense-target loss to both devices: write its struct with
// gradient_scale and row in losses/losses.hpp, and add it to the list below
// (src/cuda/losses.cu compiles the kernel for every entry).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "typeflow/backend/cuda/softmax_cross_entropy.hpp"
#include "typeflow/core/half.hpp"
#include "typeflow/core/host_device.hpp"
#include "typeflow/losses/losses.hpp"

namespace typeflow::backend::cuda {

template <class... Loss>
struct loss_list {};

// The dense-target losses the kernel library compiles.
using device_row_losses =
    loss_list<losses::categorical_crossentropy, losses::mean_squared_error, losses::mean_absolute_error, losses::huber,
              losses::binary_crossentropy, losses::kl_divergence, losses::cosine_similarity>;

template <class Loss, class List>
inline constexpr bool listed = false;
template <class Loss, class... L>
inline constexpr bool listed<Loss, loss_list<L...>> = (std::is_same_v<Loss, L> || ...);

// Whether compile(..., loss) can train on tf::cuda.
template <class Loss>
inline constexpr bool has_device_loss =
    std::is_same_v<Loss, losses::sparse_categorical_crossentropy> || listed<Loss, device_row_losses>;

// Loss.row over (rows, width) outputs and targets on the device; rows past
// valid_rows get zero loss and gradient. d_outputs: d(mean loss)/d(outputs)
// times gradient_scale. Defined in kernels/row_loss.cuh (kernel library).
template <class Loss>
void row_loss(const Loss& loss, const float* outputs, const float* targets, float* d_outputs, float* row_losses,
              int rows, int width, int valid_rows, float gradient_scale, cudaStream_t stream);

// What the engine calls: labels are the batch's on the device (int32 class
// ids for a sparse loss, one float per output value for a dense one). The
// outputs and their gradient have rows of `width` values, row_stride apart
// (a GPU's tied_logits pads them: training_state::row_stride); only the
// sparse cross-entropy takes padded rows (the engine's compile checks it).
struct device_loss_base {
  virtual ~device_loss_base() = default;
  virtual losses::label_form form() const = 0;
  virtual void record(const float* outputs, const void* labels, float* d_outputs, float* row_losses, int rows,
                      int width, int row_stride, int valid_rows, cudaStream_t stream) const = 0;
  // The same over bf16 outputs and gradient, the gradient written over the
  // outputs (a GPU's bf16 logits, layers/embedding.hpp): only the sparse
  // cross-entropy from logits reads them (the engine's compile checks it).
  virtual void record_bf16(const typeflow::bf16* /*outputs*/, const void* /*labels*/, typeflow::bf16* /*d_outputs*/,
                           float* /*row_losses*/, int /*rows*/, int /*width*/, int /*row_stride*/,
                           int /*valid_rows*/, cudaStream_t /*stream*/) const {
    throw std::logic_error("typeflow: this loss reads float32 outputs on tf::cuda, not a head's bf16 logits");
  }
  // Room for `rows` rows on the current device, before any record() is
  // captured (a loss per output keeps blocks there; the others need none).
  virtual void prepare(int /*rows*/) {}
};

// A bf16 loss gradient's rows times their weights, in place (the sample and
// class weights of a GPU's bf16 logits: train/cuda_engine.hpp); rounded to
// bf16 again. for_each_index over rows x row_stride elements.
struct weight_bf16_rows {
  const float* weights;
  typeflow::bf16* gradient;
  std::size_t row_stride;
  TYPEFLOW_HOST_DEVICE void operator()(std::size_t i) const {
    gradient[i] = typeflow::bf16(weights[i / row_stride] * static_cast<float>(gradient[i]));
  }
};

template <class Loss>
struct device_loss final : device_loss_base {
  static_assert(has_device_loss<Loss>,
                "this loss has no executor on tf::cuda: a dense-target loss needs `row` and an entry in "
                "backend/cuda/losses.hpp's device_row_losses");
  Loss loss;
  explicit device_loss(Loss l) : loss(l) {}
  losses::label_form form() const override { return Loss::labels; }
  void record(const float* outputs, const void* labels, float* d_outputs, float* row_losses, int rows, int width,
              int row_stride, int valid_rows, cudaStream_t stream) const override {
    if constexpr (std::is_same_v<Loss, losses::sparse_categorical_crossentropy>) {
      sparse_categorical_crossentropy(loss.from_logits, outputs, static_cast<const std::int32_t*>(labels), d_outputs,
                                      row_losses, rows, width, valid_rows, 1.f, stream, nullptr, row_stride);
    } else {
      if (row_stride != width)
        throw std::invalid_argument("typeflow: " + std::string(Loss::name) + " on tf::cuda reads rows of " +
                                    std::to_string(width) + " values back to back, not " +
                                    std::to_string(row_stride) + " apart");
      row_loss(loss, outputs, static_cast<const float*>(labels), d_outputs, row_losses, rows, width, valid_rows, 1.f,
               stream);
    }
  }
  void record_bf16(const typeflow::bf16* outputs, const void* labels, typeflow::bf16* d_outputs, float* row_losses,
                   int rows, int width, int row_stride, int valid_rows, cudaStream_t stream) const override {
    if constexpr (std::is_same_v<Loss, losses::sparse_categorical_crossentropy>) {
      if (!loss.from_logits)
        throw std::invalid_argument("typeflow: sparse_categorical_crossentropy{.from_logits = false} on a head's bf16 "
                                    "logits: they are logits; use from_logits = true");
      sparse_softmax_cross_entropy(outputs, static_cast<const std::int32_t*>(labels), d_outputs, row_losses, rows,
                                   width, valid_rows, 1.f, stream, nullptr, row_stride);
    } else {
      device_loss_base::record_bf16(outputs, labels, d_outputs, row_losses, rows, width, row_stride, valid_rows,
                                    stream);
    }
  }
};

template <class Loss>
std::unique_ptr<device_loss_base> make_device_loss(const Loss& loss) {
  return std::make_unique<device_loss<Loss>>(loss);
}

}  // namespace typeflow::backend::cuda

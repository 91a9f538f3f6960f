// Softmax and sparse categorical cross-entropy over the last axis on the GPU:
// losses/losses.hpp's arithmetic (through core/row_math.hpp) on (rows, classes)
// row-major float32 data, one fused pass per row.
//
//   sparse_softmax_cross_entropy              from logits z:
//       row_loss[r] = lse(z) - z[y]
//       d_logits    = (softmax(z) - onehot(y)) * gradient_scale / valid_rows
//   sparse_crossentropy_from_probabilities    from probabilities p (Keras's
//       from_logits=false): row_loss = -log(clip(p[y] / sum(p))), the
//       gradient of that times gradient_scale / valid_rows (zero where the
//       clip holds)
//   softmax_forward                           p = softmax(z) per row
//   softmax_backward                          the softmax layer's d_in, in place
//   mean_of                                   mean of n floats into one device float
//
// Row strides: row r of the inputs and of the gradient starts at r *
// row_stride (0: classes; a GPU's tied_logits pads its rows, layers/
// embedding.hpp); only the first `classes` columns are read or written.
//
// Rows r >= valid_rows are padding: zero loss, zero gradient, and their
// labels are never read (labels may hold just valid_rows entries).
// valid_rows must lie in [0, rows]; valid_rows == 0 gives scale 0.
// gradient_scale is 1 for the plain mean loss, or the loss scale.
//
// A label outside [0, classes) in a valid row is never used as an index: that
// row gets a NaN loss and a zero gradient, and when bad_labels is non-null
// *bad_labels is increased by one (atomicAdd; the final count does not depend
// on the order). The caller zeroes it and reads it back when it wants to know.
//
// Null pointers: d_logits / d_probabilities (loss only), row_loss (gradient only).
// Aliasing: the gradient may be written over its input (d_logits == logits,
// d_probabilities == probabilities, p == z); each element is read by the
// thread that later writes it. No other overlap. Results are bitwise
// repeatable: fixed reduction orders, no atomics on values.
//
// Rows up to 8192 classes are held in registers by a group of 32..1024
// threads; wider rows (a GPT vocabulary) are streamed by 1024-thread blocks
// and read twice. float4 access when the row pointers are 16-byte aligned
// and classes % 4 == 0, or for logits row_stride % 4 == 0 (a padded row's
// last chunk reads padding, which it leaves out, and writes only its own
// columns). Everything is
// enqueued on `stream` (graph-capturable).
#pragma once

// Declared here for any compiler; defined, with their kernels, in
// kernels/softmax_cross_entropy.cuh, which nvcc compiles once into typeflow::cuda's
// kernel library (src/cuda/softmax_cross_entropy.cu).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "typeflow/core/half.hpp"

namespace typeflow::backend::cuda {

// The row kernels' shared precondition: rows >= 0, width > 0, 0 <= valid_rows <= rows.
inline void check_loss_rows(const char* what, int rows, int width, int valid_rows) {
  if (rows < 0 || width <= 0 || valid_rows < 0 || valid_rows > rows)
    throw std::invalid_argument(std::string("typeflow: ") + what +
                                ": needs rows >= 0, width > 0 and 0 <= valid_rows <= rows, got rows " +
                                std::to_string(rows) + ", width " + std::to_string(width) + ", valid_rows " +
                                std::to_string(valid_rows));
}

void sparse_softmax_cross_entropy(const float* logits, const std::int32_t* labels, float* d_logits, float* row_loss,
                                  int rows, int classes, int valid_rows, float gradient_scale, cudaStream_t stream,
                                  int* bad_labels = nullptr, int row_stride = 0);

// bf16 logits and d_logits (a GPU's tied_logits under mixed_bfloat16,
// layers/embedding.hpp): each logit read into float, the row's log-sum-exp,
// loss and gradient computed in float as above, the gradient rounded to bf16
// (core/half.hpp's rounding) as it is stored, over the logits when
// d_logits == logits.
void sparse_softmax_cross_entropy(const typeflow::bf16* logits, const std::int32_t* labels, typeflow::bf16* d_logits,
                                  float* row_loss, int rows, int classes, int valid_rows, float gradient_scale,
                                  cudaStream_t stream, int* bad_labels = nullptr, int row_stride = 0);

void sparse_crossentropy_from_probabilities(const float* probabilities, const std::int32_t* labels,
                                            float* d_probabilities, float* row_loss, int rows, int classes,
                                            int valid_rows, float gradient_scale, cudaStream_t stream,
                                            int* bad_labels = nullptr, int row_stride = 0);

// losses::sparse_categorical_crossentropy{from_logits} on the GPU: one of the two above.
void sparse_categorical_crossentropy(bool from_logits, const float* outputs, const std::int32_t* labels,
                                     float* d_outputs, float* row_loss, int rows, int classes, int valid_rows,
                                     float gradient_scale, cudaStream_t stream, int* bad_labels = nullptr,
                                     int row_stride = 0);

void softmax_forward(const float* z, float* p, int rows, int classes, cudaStream_t stream);

// The softmax layer's backward, in place on the gradient: g = y * (g - Σ g·y)
// per row (core/row_math.hpp's softmax_input_gradient), a warp per row.
void softmax_backward(const float* y, float* gradient, int rows, int classes, cudaStream_t stream);

// *result_device = (Σ values[0, n)) / n, summed in double in a fixed order
// (0 when n is 0): the step's loss from row_loss with n = valid_rows, as
// train/cpu_engine.hpp's compute_loss does on the CPU.
void mean_of(const float* values, int n, float* result_device, cudaStream_t stream);

}  // namespace typeflow::backend::cuda

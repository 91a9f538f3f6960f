// causal_self_attention's core on the GPU, between its two projections:
// from qkv (rows = batch x steps, 3D) to the heads' concatenation y (rows,
// D) and back, through core/attention_rows.hpp's arithmetic (the formulas
// are there). The (T, T) probabilities never reach global memory: forward
// keeps two floats per query row (its softmax statistics), and backward
// recomputes each probability from them. A thread per query row forward and
// for d_q, a thread per key row for d_k and d_v: every gradient element is
// written once, no atomics, and two runs give the same bits.
//
//   attention_forward   y, and `statistics` (batch x heads x steps x 2 floats)
//   attention_backward  d_qkv (rows, 3D) from d_y, with `delta` (batch x
//                       heads x steps floats) as scratch
//   attention_decode    one position per sample (model::generate): its k and
//                       v into the caches, then y over positions 0..position,
//                       a thread per (sample, head)
//
// Values are float32, rounded to `rounding`'s dtype where the CPU layer
// rounds (core/attention_rows.hpp). With `dropout.rate` > 0 the attention
// weights are dropped with the CPU layer's mask (layers/dropout_mask.hpp:
// attention_dropout_seed, element (pair T + i) T + j). Head widths up to
// attention_max_head_width. Everything is enqueued on `stream`
// (graph-capturable).
#pragma once

// Declared here for any compiler; defined, with their kernels, in
// kernels/attention.cuh, which nvcc compiles once into typeflow::cuda's
// kernel library (src/cuda/attention.cu).

#include <cuda_runtime.h>

#include "typeflow/backend/cuda/elementwise.hpp"  // dropout_draw

namespace typeflow::backend::cuda {

inline constexpr int attention_max_head_width = 128;

enum class attention_rounding { none, float16, bfloat16 };

struct attention_shape {
  int batch, steps, heads, head_width;
  float scale;  // 1 / sqrt(head_width), as the CPU layer's
};

struct attention_dropout {
  float rate = 0.f;  // 0: no dropout (evaluation, or none configured)
  dropout_draw draw;  // layer_seed: attention_dropout_seed(run seed, salt)
};

void attention_forward(const float* qkv, float* y, float* statistics, const attention_shape& shape,
                       const attention_dropout& dropout, attention_rounding rounding, cudaStream_t stream);

void attention_backward(const float* qkv, const float* d_y, const float* statistics, float* delta, float* d_qkv,
                        const attention_shape& shape, const attention_dropout& dropout, attention_rounding rounding,
                        cudaStream_t stream);

// qkv: (batch, 3D), the fed position's rows; caches: per sample a key cache
// then a value cache, (shape.steps, D) each (the CPU layer's layout);
// y: (batch, D). shape.steps is the caches' length, position < steps.
void attention_decode(const float* qkv, float* caches, float* y, const attention_shape& shape, int position,
                      attention_rounding rounding, cudaStream_t stream);

}  // namespace typeflow::backend::cuda

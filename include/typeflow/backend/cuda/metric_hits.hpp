// A metric's hits over a step's rows, counted on the GPU, so that the step
// sends back one number per metric instead of its outputs (a language
// model's logits: 1.65 GB a step for GPT-2 at 8 x 1024 tokens).
//
// For the metrics whose update is a hit per row (core/row_ranking.hpp's
// hit_count_rule: argmax, or top-k, against a class id or a dense target
// row's argmax): `outputs` (rows, classes) float32, rows
// row_stride apart (0: classes; a GPU's tied_logits pads them); `labels` int32 ids
// (sparse) or float targets (rows, classes); the rows counted are the first
// valid_samples[0] * rows_per_sample (all of them when it is negative or
// the pointer is null: the step values' count, backend/cuda/context.hpp).
// Adds the count to *hits, which the caller zeroes. Integer atomics: the
// same count on every run. Declared here for any compiler; defined in
// kernels/metric_hits.cuh (typeflow::cuda's kernel library,
// src/cuda/metric_hits.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "typeflow/core/half.hpp"
#include "typeflow/core/row_ranking.hpp"

namespace typeflow::backend::cuda {

void count_hits(hit_count_rule count, bool sparse_labels, const float* outputs, const void* labels,
                int rows, int classes, const std::int32_t* valid_samples, int rows_per_sample,
                unsigned long long* hits, cudaStream_t stream, int row_stride = 0);
// The same over bf16 outputs (a GPU's logits under mixed_bfloat16), compared as floats.
void count_hits(hit_count_rule count, bool sparse_labels, const typeflow::bf16* outputs, const void* labels,
                int rows, int classes, const std::int32_t* valid_samples, int rows_per_sample,
                unsigned long long* hits, cudaStream_t stream, int row_stride = 0);

}  // namespace typeflow::backend::cuda

// The kernel of backend/cuda/metric_hits.hpp and its launcher's definition.
// Compiled once by nvcc into typeflow::cuda's kernel library
// (src/cuda/metric_hits.cu). Include it nowhere else.
//
// A warp per row: lane l scans columns l, l + 32, ... (core/row_ranking.hpp,
// the functions the CPU's metrics scan with) and the butterfly merges the
// lanes' argmax candidates, or adds their counts of greater values; a
// vocabulary-wide row is read once, coalesced. Each warp's lane 0 adds its
// rows' hits with one integer atomic.
#pragma once
#include "typeflow/backend/cuda/metric_hits.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/core/row_ranking.hpp"

namespace typeflow::backend::cuda {

namespace metric_hits_detail {

constexpr int lanes = 32;
constexpr unsigned threads = 256;  // 8 rows at a time per block

// The row's argmax, on every lane.
template <class T>
__device__ __forceinline__ int warp_argmax(const T* row, int n, int lane) {
  argmax_candidate c = lane_argmax(row, n, lane, lanes);
  for (int offset = lanes / 2; offset > 0; offset /= 2) {
    argmax_candidate other;
    other.value = __shfl_xor_sync(0xffffffffu, c.value, offset);
    other.column = __shfl_xor_sync(0xffffffffu, c.column, offset);
    c = merge(c, other);
  }
  return argmax_column(row, c);
}

template <class T>
__device__ __forceinline__ int warp_count_greater(const T* row, int n, float value, int lane) {
  int greater = lane_count_greater(row, n, value, lane, lanes);
  for (int offset = lanes / 2; offset > 0; offset /= 2) greater += __shfl_xor_sync(0xffffffffu, greater, offset);
  return greater;
}

template <bool Sparse, hit_rule Rule, class T>
__global__ void hits_kernel(const T* outputs, const void* labels, int rows, int classes, int stride, int k,
                            const std::int32_t* valid_samples, int rows_per_sample, unsigned long long* hits) {
  const int lane = static_cast<int>(threadIdx.x) % lanes;
  const int warp = static_cast<int>(threadIdx.x) / lanes;
  constexpr int warps = static_cast<int>(threads) / lanes;
  int counted = rows;
  if (valid_samples && *valid_samples >= 0 && *valid_samples * rows_per_sample < rows)
    counted = *valid_samples * rows_per_sample;
  unsigned long long own = 0;
  for (int r = static_cast<int>(blockIdx.x) * warps + warp; r < counted; r += static_cast<int>(gridDim.x) * warps) {
    const T* row = outputs + static_cast<std::size_t>(r) * static_cast<std::size_t>(stride);
    int target;
    if constexpr (Sparse)
      target = static_cast<const std::int32_t*>(labels)[r];
    else
      target = warp_argmax(
          static_cast<const float*>(labels) + static_cast<std::size_t>(r) * static_cast<std::size_t>(classes), classes,
          lane);
    bool hit;
    if constexpr (Rule == hit_rule::argmax)
      hit = warp_argmax(row, classes, lane) == target;
    else
      hit = warp_count_greater(row, classes, static_cast<float>(row[target]), lane) < k;
    own += hit;
  }
  if (lane == 0 && own) atomicAdd(hits, own);
}

template <bool Sparse, hit_rule Rule, class T>
void launch(int k, const T* outputs, const void* labels, int rows, int classes, int stride,
            const std::int32_t* valid_samples, int rows_per_sample, unsigned long long* hits, cudaStream_t stream) {
  constexpr int rows_per_block = static_cast<int>(threads) / lanes;
  const int blocks = (rows + rows_per_block - 1) / rows_per_block;
  hits_kernel<Sparse, Rule, T><<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), threads, 0, stream>>>(
      outputs, labels, rows, classes, stride, k, valid_samples, rows_per_sample, hits);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace metric_hits_detail

namespace metric_hits_detail {
template <class T>
void count(hit_count_rule count, bool sparse_labels, const T* outputs, const void* labels, int rows, int classes,
           const std::int32_t* valid_samples, int rows_per_sample, unsigned long long* hits, cudaStream_t stream,
           int row_stride) {
  if (rows <= 0 || classes <= 0) return;
  const int stride = row_stride_for("count_hits", classes, row_stride);
  using rule = hit_rule;
  const bool top_k = count.rule == rule::top_k;
  if (sparse_labels)
    (top_k ? launch<true, rule::top_k, T> : launch<true, rule::argmax, T>)(
        count.k, outputs, labels, rows, classes, stride, valid_samples, rows_per_sample, hits, stream);
  else
    (top_k ? launch<false, rule::top_k, T> : launch<false, rule::argmax, T>)(
        count.k, outputs, labels, rows, classes, stride, valid_samples, rows_per_sample, hits, stream);
}
}  // namespace metric_hits_detail

void count_hits(hit_count_rule count, bool sparse_labels, const float* outputs, const void* labels,
                int rows, int classes, const std::int32_t* valid_samples, int rows_per_sample,
                unsigned long long* hits, cudaStream_t stream, int row_stride) {
  metric_hits_detail::count(count, sparse_labels, outputs, labels, rows, classes, valid_samples, rows_per_sample, hits,
                            stream, row_stride);
}

void count_hits(hit_count_rule count, bool sparse_labels, const typeflow::bf16* outputs, const void* labels,
                int rows, int classes, const std::int32_t* valid_samples, int rows_per_sample,
                unsigned long long* hits, cudaStream_t stream, int row_stride) {
  metric_hits_detail::count(count, sparse_labels, outputs, labels, rows, classes, valid_samples, rows_per_sample, hits,
                            stream, row_stride);
}

}  // namespace typeflow::backend::cuda

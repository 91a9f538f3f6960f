// The kernels of backend/cuda/embedding.hpp and its launchers' definitions.
// Compiled once by nvcc into typeflow::cuda's kernel library
// (src/cuda/embedding.cu); to build without that library, compile that one
// source into your program instead. Include it nowhere else: the launchers
// are ordinary (not inline) functions.
#pragma once
#include "typeflow/backend/cuda/embedding.hpp"

#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/core/embedding_rows.hpp"

namespace typeflow::backend::cuda {

namespace embedding_detail {

namespace er = typeflow::embedding_rows;

constexpr unsigned threads = 256;
constexpr std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

inline void check_shape(const char* what, long long rows, long long dim, long long extent) {
  if (rows < 0 || dim <= 0 || extent <= 0)
    throw std::invalid_argument(std::string(what) + ": rows " + std::to_string(rows) + ", width " +
                                std::to_string(dim) + ", table rows " + std::to_string(extent) +
                                " (rows must be >= 0, the others > 0)");
}

// The sort's keys: bits enough for [0, vocab], the value vocab standing for
// an id outside the vocabulary (its run is skipped).
inline int key_bits(int vocab) {
  int bits = 1;
  while (bits < 31 && (1ll << bits) <= vocab) ++bits;
  return bits;
}

// Scratch: [keys in][keys sorted][rows in][rows sorted][CUB's temporary storage].
struct sort_scratch {
  std::size_t keys_bytes, cub_bytes;
  std::size_t total() const { return 4 * keys_bytes + cub_bytes; }
};
inline sort_scratch scratch_for(int rows, int vocab) {
  std::size_t cub_bytes = 0;
  TYPEFLOW_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, static_cast<const std::int32_t*>(nullptr),
                                                      static_cast<std::int32_t*>(nullptr),
                                                      static_cast<const std::int32_t*>(nullptr),
                                                      static_cast<std::int32_t*>(nullptr), rows, 0, key_bits(vocab)));
  return {aligned(static_cast<std::size_t>(rows) * sizeof(std::int32_t)), aligned(cub_bytes)};
}

__global__ void gather(const std::int32_t* ids, const float* table, std::size_t stride, float* out, int rows, int dim,
                       int vocab) {
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(dim);
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const int r = static_cast<int>(i / static_cast<std::size_t>(dim));
    const int c = static_cast<int>(i % static_cast<std::size_t>(dim));
    out[i] = er::gathered(table, stride, ids[r], vocab, c);
  }
}

__global__ void sort_pairs_in(const std::int32_t* ids, std::int32_t* keys, std::int32_t* rows_of, int rows,
                              int vocab) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < rows;
       i += static_cast<int>(gridDim.x * blockDim.x)) {
    const std::int32_t id = ids[i];
    keys[i] = id >= 0 && id < vocab ? id : vocab;
    rows_of[i] = i;
  }
}

// One block per sorted position; the block at a run's first position adds
// the run into its id's row, a thread per column.
__global__ void add_runs(const std::int32_t* keys, const std::int32_t* rows_of, const float* d_out, float* d_table,
                         std::size_t stride, int rows, int dim, int vocab) {
  const int i = static_cast<int>(blockIdx.x);
  if (!er::starts_run(keys, i) || keys[i] >= vocab) return;
  const int end = er::run_end(keys, i, rows);
  float* g = d_table + static_cast<std::size_t>(keys[i]) * stride;
  for (int c = static_cast<int>(threadIdx.x); c < dim; c += static_cast<int>(blockDim.x))
    g[c] = er::add_run(g[c], rows_of, i, end, d_out, dim, c);
}

__global__ void add_positions(const float* in, const float* table, std::size_t stride, float* out, int length,
                              int dim, std::size_t n) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t r = i / static_cast<std::size_t>(dim);
    const std::size_t c = i % static_cast<std::size_t>(dim);
    out[i] = in[i] + table[(r % static_cast<std::size_t>(length)) * stride + c];
  }
}

__global__ void sum_positions(const float* d_out, float* d_table, std::size_t stride, int batch, int length, int dim) {
  const std::size_t n = static_cast<std::size_t>(length) * static_cast<std::size_t>(dim);
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const int t = static_cast<int>(i / static_cast<std::size_t>(dim));
    const int c = static_cast<int>(i % static_cast<std::size_t>(dim));
    d_table[static_cast<std::size_t>(t) * stride + static_cast<std::size_t>(c)] =
        er::summed_positions(d_out, batch, length, dim, t, c);
  }
}

}  // namespace embedding_detail

void embedding_forward(const std::int32_t* ids, const float* table, std::size_t stride, float* out, int rows, int dim,
                       int vocab, cudaStream_t stream) {
  namespace d = embedding_detail;
  d::check_shape("embedding_forward", rows, dim, vocab);
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(dim);
  if (n == 0) return;
  d::gather<<<blocks_for(n, d::threads), d::threads, 0, stream>>>(ids, table, stride, out, rows, dim, vocab);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

std::size_t embedding_backward_scratch_bytes(int rows, int vocab) {
  embedding_detail::check_shape("embedding_backward_scratch_bytes", rows, 1, vocab);
  return rows == 0 ? 0 : embedding_detail::scratch_for(rows, vocab).total();
}

void embedding_backward(const std::int32_t* ids, const float* d_out, float* d_table, std::size_t stride, int rows,
                        int dim, int vocab, bool table_gradient_written, std::byte* scratch, std::size_t scratch_bytes,
                        cudaStream_t stream) {
  namespace d = embedding_detail;
  d::check_shape("embedding_backward", rows, dim, vocab);
  if (!table_gradient_written)
    TYPEFLOW_CUDA_CHECK(
        cudaMemsetAsync(d_table, 0, static_cast<std::size_t>(vocab) * stride * sizeof(float), stream));
  if (rows == 0) return;
  const d::sort_scratch layout = d::scratch_for(rows, vocab);
  if (scratch_bytes < layout.total())
    throw std::invalid_argument("embedding_backward: " + std::to_string(scratch_bytes) + " bytes of scratch for " +
                                std::to_string(rows) + " rows; it needs " + std::to_string(layout.total()) +
                                " (embedding_backward_scratch_bytes)");
  auto* keys = reinterpret_cast<std::int32_t*>(scratch);
  auto* keys_sorted = reinterpret_cast<std::int32_t*>(scratch + layout.keys_bytes);
  auto* rows_of = reinterpret_cast<std::int32_t*>(scratch + 2 * layout.keys_bytes);
  auto* rows_sorted = reinterpret_cast<std::int32_t*>(scratch + 3 * layout.keys_bytes);
  std::size_t cub_bytes = layout.cub_bytes;
  d::sort_pairs_in<<<blocks_for(static_cast<std::size_t>(rows), d::threads), d::threads, 0, stream>>>(
      ids, keys, rows_of, rows, vocab);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
  // A stable LSD radix sort: each id's rows stay in ascending order.
  TYPEFLOW_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch + 4 * layout.keys_bytes, cub_bytes, keys, keys_sorted,
                                                      rows_of, rows_sorted, rows, 0, d::key_bits(vocab), stream));
  const unsigned block = dim >= 256 ? 256u : dim >= 128 ? 128u : dim >= 64 ? 64u : 32u;
  d::add_runs<<<static_cast<unsigned>(rows), block, 0, stream>>>(keys_sorted, rows_sorted, d_out, d_table, stride,
                                                                 rows, dim, vocab);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

void positional_embedding_forward(const float* in, const float* table, std::size_t stride, float* out, int batch,
                                  int length, int dim, cudaStream_t stream) {
  namespace d = embedding_detail;
  d::check_shape("positional_embedding_forward", batch, dim, length);
  const std::size_t n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(length) * static_cast<std::size_t>(dim);
  if (n == 0) return;
  d::add_positions<<<blocks_for(n, d::threads), d::threads, 0, stream>>>(in, table, stride, out, length, dim, n);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

void positional_embedding_backward(const float* d_out, float* d_table, std::size_t stride, int batch, int length,
                                   int dim, cudaStream_t stream) {
  namespace d = embedding_detail;
  d::check_shape("positional_embedding_backward", batch, dim, length);
  const std::size_t n = static_cast<std::size_t>(length) * static_cast<std::size_t>(dim);
  d::sum_positions<<<blocks_for(n, d::threads), d::threads, 0, stream>>>(d_out, d_table, stride, batch, length, dim);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace typeflow::backend::cuda

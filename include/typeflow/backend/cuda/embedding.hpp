// embedding's and positional_embedding's kernels on the GPU
// (layers/embedding.hpp; core/embedding_rows.hpp holds their arithmetic,
// which tests/unit/embedding_rows_test.cpp replays against the CPU layers):
//
//   embedding_forward      out (rows, dim) = table[ids] (rows of `stride` floats)
//   embedding_backward     d_table[id] += Σ d_out over the rows with that id:
//                          the (id, row) pairs sorted stably by id (CUB's
//                          radix sort), then one thread block per run of an
//                          id, a thread per column, adding the run in order.
//                          Deterministic: no float atomics, and the same
//                          bits as the CPU's scatter. When the table's
//                          gradient was not written before (no tied_logits),
//                          it is zeroed first.
//   positional_embedding_forward   out = in + table[position] per row
//   positional_embedding_backward  d_table[t] = Σ_b d_out[b][t] (written)
//
// An id outside [0, vocab) reads and writes nothing (its output row is 0);
// the engine refuses such a batch on the host, naming the sample, before it
// is staged. Everything is enqueued on `stream` with no allocation and no
// wait (graph-capturable); embedding_backward's scratch is
// embedding_backward_scratch_bytes(rows, vocab) bytes of device memory,
// 256-byte aligned.
#pragma once

// Declared here for any compiler; defined, with their kernels, in
// kernels/embedding.cuh, which nvcc compiles once into typeflow::cuda's
// kernel library (src/cuda/embedding.cu).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace typeflow::backend::cuda {

void embedding_forward(const std::int32_t* ids, const float* table, std::size_t stride, float* out, int rows, int dim,
                       int vocab, cudaStream_t stream);

std::size_t embedding_backward_scratch_bytes(int rows, int vocab);

void embedding_backward(const std::int32_t* ids, const float* d_out, float* d_table, std::size_t stride, int rows,
                        int dim, int vocab, bool table_gradient_written, std::byte* scratch, std::size_t scratch_bytes,
                        cudaStream_t stream);

void positional_embedding_forward(const float* in, const float* table, std::size_t stride, float* out, int batch,
                                  int length, int dim, cudaStream_t stream);

void positional_embedding_backward(const float* d_out, float* d_table, std::size_t stride, int batch, int length,
                                   int dim, cudaStream_t stream);

}  // namespace typeflow::backend::cuda

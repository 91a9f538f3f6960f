// The per-thread arithmetic of the embeddings' kernels on the GPU
// (backend/cuda/kernels/embedding.cuh), as plain functions that a CPU test
// replays in the kernels' thread layout against the CPU executors
// (backend/cpu/embedding.hpp):
//
//   gathered        embedding's forward, one output element: table[id][c],
//                   or 0 for an id outside [0, vocab) (never read: the host
//                   refuses such a batch before it reaches the device)
//   starts_run      the backward's rows are sorted by id, stably; the
//   run_end         thread at the first row of an id's run adds the run
//   add_run         into that id's gradient row, in the run's order
//   summed_positions  positional_embedding's backward: the batch's sum at
//                   one (position, column)
//
// Order of additions, and so the bits: a stable sort keeps each id's rows in
// ascending order, and add_run starts from the gradient already there (zero,
// or tied_logits' part), so d_table[id][c] = ((g + d[r0][c]) + d[r1][c]) + ...
// is the CPU's scatter_add_rows to the bit; summed_positions adds the batch
// in ascending order from zero, as the CPU does. No float atomics: two runs
// give the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "typeflow/core/host_device.hpp"

namespace typeflow::embedding_rows {

TYPEFLOW_HOST_DEVICE float gathered(const float* table, std::size_t stride, std::int32_t id, int vocab, int c) {
  return id >= 0 && id < vocab ? table[static_cast<std::size_t>(id) * stride + static_cast<std::size_t>(c)] : 0.f;
}

// ids: sorted. Whether position i is the first of its id's run.
TYPEFLOW_HOST_DEVICE bool starts_run(const std::int32_t* ids, int i) { return i == 0 || ids[i] != ids[i - 1]; }

// The end (one past) of the run that starts at `begin`.
TYPEFLOW_HOST_DEVICE int run_end(const std::int32_t* ids, int begin, int rows) {
  int end = begin + 1;
  while (end < rows && ids[end] == ids[begin]) ++end;
  return end;
}

// start + the run's rows of d_out (rows, dim) at column c, in the run's order.
// rows_of[i]: which row of d_out sorted position i came from.
TYPEFLOW_HOST_DEVICE float add_run(float start, const std::int32_t* rows_of, int begin, int end, const float* d_out,
                                   int dim, int c) {
  float sum = start;
  for (int i = begin; i < end; ++i)
    sum += d_out[static_cast<std::size_t>(rows_of[i]) * static_cast<std::size_t>(dim) + static_cast<std::size_t>(c)];
  return sum;
}

// Σ_b d_out[b][t][c] over b = 0 .. batch - 1, from zero; d_out is (batch, length, dim).
TYPEFLOW_HOST_DEVICE float summed_positions(const float* d_out, int batch, int length, int dim, int t, int c) {
  float sum = 0.f;
  for (int b = 0; b < batch; ++b)
    sum += d_out[(static_cast<std::size_t>(b) * static_cast<std::size_t>(length) + static_cast<std::size_t>(t)) *
                     static_cast<std::size_t>(dim) +
                 static_cast<std::size_t>(c)];
  return sum;
}

}  // namespace typeflow::embedding_rows

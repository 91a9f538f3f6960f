// embedding, positional_embedding and tied_logits on the CPU (the layers:
// layers/embedding.hpp): rows copied and added over the cores, the table's
// gradient scattered by id with the columns split between threads, and the
// tied logits as three oneDNN matmuls on the embedding matrix (in 16 bits
// under a 16-bit policy: bf16 primitives where the CPU has them, as dense's).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "typeflow/backend/cpu/context.hpp"
#include "typeflow/backend/cpu/matmul.hpp"
#include "typeflow/core/parallel.hpp"
#include "typeflow/layers/embedding.hpp"
#include "typeflow/contract/executor.hpp"
#include "typeflow/precision/storage.hpp"

namespace typeflow {

namespace detail {
// d_table[row] += d_out[r] for every r with ids[r] == row; threads split
// the columns, so no two write the same float.
inline void scatter_add_rows(float* table, std::size_t stride, const std::int32_t* ids, const float* d_out,
                             std::ptrdiff_t rows, int dim) {
#pragma omp parallel for schedule(static) if (rows * dim >= typeflow::parallel_threshold)
  for (int c0 = 0; c0 < dim; c0 += 32) {
    const int c1 = c0 + 32 < dim ? c0 + 32 : dim;
    for (std::ptrdiff_t r = 0; r < rows; ++r) {
      float* to = table + static_cast<std::size_t>(ids[r]) * stride;
      const float* from = d_out + r * dim;
#pragma omp simd
      for (int c = c0; c < c1; ++c) to[c] += from[c];
    }
  }
}

// d_table[t] += Σ_b d_out[b][t] for t < length, the batch in ascending order;
// threads split the positions. d_out is (batch, length, dim).
inline void sum_positions(float* table, std::size_t stride, const float* d_out, int batch, int length, int dim) {
  typeflow::parallel_for(static_cast<std::ptrdiff_t>(length), [=](std::ptrdiff_t t) {
    float* g = table + static_cast<std::size_t>(t) * stride;
    for (int b = 0; b < batch; ++b) {
      const float* row = d_out + (static_cast<std::ptrdiff_t>(b) * length + t) * dim;
#pragma omp simd
      for (int c = 0; c < dim; ++c) g[c] += row[c];
    }
  });
}
}  // namespace detail

template <int Vocab, int Dim, class... Options, class Layer, int Batch>
class executor<embedding<Vocab, Dim, Options...>, Layer, Batch, cpu> : public executor_defaults {
  using table = typename Layer::table;
  static constexpr int vocab = Layer::vocab;
  static constexpr int dim = Layer::dim;
  static constexpr int length = Layer::length;
  static constexpr std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(Batch) * length;

 public:
  explicit executor(const layer_io<cpu>& io) : io_(io) {}

  void forward() {
    const auto* ids = reinterpret_cast<const std::int32_t*>(io_.in);
    check_token_ids<vocab, dim>(ids, rows, length);
    const float* weights = io_.params;
    float* out = io_.out;
    typeflow::parallel_for(rows, [=](std::ptrdiff_t r) {
      std::memcpy(out + r * dim, weights + static_cast<std::size_t>(ids[r]) * table::row_stride,
                  sizeof(float) * dim);
    });
  }

  // The gradient of the table: d_out's rows added into the rows of
  // their ids. When tied_logits shares the table it has already written
  // its part; otherwise the table's gradient starts from zero.
  void backward() {
    if (!io_.tied_gradient_written) std::memset(io_.grads, 0, sizeof(float) * table::stored_floats);
    detail::scatter_add_rows(io_.grads, table::row_stride, reinterpret_cast<const std::int32_t*>(io_.in),
                             io_.d_out, rows, dim);
  }

 private:
  layer_io<cpu> io_;
};

template <int MaxLen, class... Options, class Layer, int Batch>
class executor<positional_embedding<MaxLen, Options...>, Layer, Batch, cpu> : public executor_defaults {
  using table = typename Layer::table;
  static constexpr int length = Layer::length;
  static constexpr int dim = Layer::dim;
  static constexpr int max_len = Layer::max_len;
  static constexpr bool decoding = Layer::decoding;

 public:
  explicit executor(const layer_io<cpu>& io) : io_(io) {}

  void forward() {
    const int first = decoding ? io_.run->position : 0;
    if (first < 0 || first + length > max_len)
      throw std::out_of_range("positional_embedding<" + std::to_string(max_len) + ">: position " +
                              std::to_string(first + length - 1) + " is beyond the table");
    const float* in = io_.in;
    float* out = io_.out;
    const float* table_rows = io_.params + static_cast<std::size_t>(first) * table::row_stride;
    typeflow::parallel_for(static_cast<std::ptrdiff_t>(Batch) * length, [=](std::ptrdiff_t r) {
      const float* p = table_rows + static_cast<std::size_t>(r % length) * table::row_stride;
      const float* x = in + r * dim;
      float* y = out + r * dim;
#pragma omp simd
      for (int c = 0; c < dim; ++c) y[c] = x[c] + p[c];
    });
  }

  // d_table[t] = the sum over the batch of d_out[., t]; d_in is d_out.
  void backward() {
    std::memset(io_.grads, 0, sizeof(float) * table::stored_floats);
    detail::sum_positions(io_.grads, table::row_stride, io_.d_out, Batch, length, dim);
  }

 private:
  layer_io<cpu> io_;
};

template <class Layer, int Batch>
class executor<tied_logits, Layer, Batch, cpu> {
  static constexpr int vocab = Layer::vocab;
  static constexpr int dim = Layer::dim;
  static constexpr int stride = Layer::stride;
  static constexpr int rows = Batch * static_cast<int>(Layer::rows_per_sample);
  using compute_dtype = typename Layer::compute_dtype;
  static constexpr bool low_precision = Layer::low_precision;
  static constexpr bool native_possible = Layer::native_bf16_possible;

 public:
  explicit executor(const layer_io<cpu>& io) : io_(io), native_(native_possible && io.context->native_bf16) {
    const backend::cpu::gemm_storage storage{native_, false};
    // logits (rows, V) = x (rows, D) · E^T, E stored (V, stride)
    forward_ = backend::cpu::matmul(*io.context, {rows, vocab, dim, false, true, 0, stride}, false, epilogue::none,
                                    false, 1.f, storage);
    // d_E (V, D) = d_logits^T (V, rows) · x (rows, D)
    table_grad_ = backend::cpu::matmul(*io.context, {vocab, dim, rows, true, false, 0, 0, stride}, false,
                                       epilogue::none, false, 1.f, storage);
    // d_x (rows, D) = d_logits (rows, V) · E (V, D)
    input_grad_ = backend::cpu::matmul(*io.context, {rows, dim, vocab, false, false, 0, stride}, false,
                                       epilogue::none, false, 1.f, storage);
    if (native_)  // the matrix's bf16 copy, kept from step to step too (precision/weight_copies.hpp)
      table_copy_ = io.context->weight_copies.add(io.tied_params, kept_at<bf16_t>(0), Layer::table_floats,
                                                  io.workspace_persists);
  }

  std::size_t scratchpad_bytes() const {
    return std::max({forward_.scratchpad_bytes(), table_grad_.scratchpad_bytes(), input_grad_.scratchpad_bytes()});
  }
  void bind(std::byte* scratchpad) {
    const void* x = io_.in;
    const void* table = io_.tied_params;
    const void* d_logits = io_.d_out;
    if (native_) {
      x = kept_at<bf16_t>(native_input_offset);
      table = kept_at<bf16_t>(0);
      d_logits = scratch_at<bf16_t>(0);
    } else if constexpr (low_precision) {
      x = scratch_at<float>(0);
      table = scratch_at<float>(emulated_table_offset);
    }
    forward_.bind(x, table, nullptr, io_.out, scratchpad);
    table_grad_.bind(d_logits, x, nullptr, io_.tied_grads, scratchpad);
    if (io_.d_in) input_grad_.bind(d_logits, table, nullptr, io_.d_in, scratchpad);
  }
  void forward() {
    if constexpr (low_precision) round_operands();
    forward_.run();  // the logits stay float32 (layers/embedding.hpp)
  }
  void backward() {
    if constexpr (low_precision) {
      float* d_out = const_cast<float*>(io_.d_out);
      if (native_) {
        precision::round_in_place_and_store<bfloat16>(d_out, scratch_at<bf16_t>(0), logit_count);
      } else {
        precision::round_in_place<compute_dtype>(d_out, logit_count);
        round_operands();  // scratch does not outlive a call; the workspace does
      }
    }
    table_grad_.run();
    if constexpr (low_precision) precision::round_in_place<compute_dtype>(io_.tied_grads, Layer::table_floats);
    if (io_.d_in) {
      input_grad_.run();
      if constexpr (low_precision) precision::round_in_place<compute_dtype>(io_.d_in, input_count);
    }
  }

 private:
  using bf16_t = bfloat16::value_type;
  static constexpr std::size_t input_count = static_cast<std::size_t>(rows) * dim;
  static constexpr std::size_t logit_count = static_cast<std::size_t>(rows) * vocab;
  // Scratch, emulated: [x rounded, float32][E rounded, float32]; native:
  // [d_logits, bf16]. Workspace, native (forward to backward): [E, bf16][x, bf16].
  static constexpr std::size_t emulated_table_offset = align_up(input_count * sizeof(float));
  static constexpr std::size_t native_input_offset = align_up(Layer::table_floats * sizeof(bf16_t));
  static_assert(!low_precision ||
                    std::max(emulated_table_offset + Layer::table_floats * sizeof(float),
                             logit_count * sizeof(bf16_t)) <=
                        Batch * Layer::scratch_bytes_per_sample + Layer::scratch_bytes_per_step,
                "tied_logits: the 16-bit operands exceed the layer's scratch");
  static_assert(!native_possible || native_input_offset + input_count * sizeof(bf16_t) <=
                                        Batch * Layer::workspace_bytes_per_sample + Layer::workspace_bytes_per_step,
                "tied_logits: the bf16 operands exceed the layer's workspace");
  template <class T>
  T* scratch_at(std::size_t offset) const {
    return reinterpret_cast<T*>(io_.scratch + offset);
  }
  template <class T>
  T* kept_at(std::size_t offset) const {
    return reinterpret_cast<T*>(io_.workspace + offset);
  }

  // The input and the matrix as this step's product sees them.
  void round_operands() {
    if (native_) {
      precision::from_float<bfloat16>(io_.in, kept_at<bf16_t>(native_input_offset), input_count);
      precision::refresh(io_.context->weight_copies, table_copy_);
    } else {
      precision::round_into<compute_dtype>(io_.in, scratch_at<float>(0), input_count);
      precision::round_into<compute_dtype>(io_.tied_params, scratch_at<float>(emulated_table_offset),
                                           Layer::table_floats);
    }
  }

  layer_io<cpu> io_;
  bool native_;  // bf16 products run as oneDNN bf16 primitives
  std::size_t table_copy_ = 0;  // native: the matrix's bf16 copy in the context
  backend::cpu::matmul forward_, table_grad_, input_grad_;
};

}  // namespace typeflow

// embedding, positional_embedding and tied_logits on tf::cuda: their
// executors (the kernels: backend/cuda/embedding.hpp; tied_logits' products:
// backend/cuda/matmul.hpp). backend/cuda/layers.hpp includes this.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "typeflow/backend/cuda/context.hpp"
#include "typeflow/backend/cuda/elementwise.hpp"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/backend/cuda/embedding.hpp"
#include "typeflow/backend/cuda/matmul.hpp"
#include "typeflow/layers/embedding.hpp"
#include "typeflow/contract/executor.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {
namespace backend::cuda {

// embedding: the ids' rows gathered; backward sorts the (id, row) pairs and
// adds each id's run into its row, deterministically and in the CPU's order
// (backend/cuda/embedding.hpp). The ids were checked on the host before they
// were staged (the engine's check_token_ids).
template <class Layer, int Batch>
class embedding_executor {
  using table = typename Layer::table;
  static constexpr int rows = Batch * Layer::length;

 public:
  explicit embedding_executor(const layer_io<typeflow::cuda>& io)
      : io_(io), scratch_bytes_(embedding_backward_scratch_bytes(rows, Layer::vocab)) {}
  std::size_t scratchpad_bytes() const { return scratch_bytes_; }
  void bind(std::byte* scratchpad) { scratch_ = scratchpad; }

  void forward() {
    embedding_forward(ids(), io_.params, table::row_stride, io_.out, rows, Layer::dim, Layer::vocab,
                      io_.context->stream);
  }
  // tied_logits, when it shares the table, has written its part of the
  // gradient first; otherwise the gradient starts from zero.
  void backward() {
    embedding_backward(ids(), io_.d_out, io_.grads, table::row_stride, rows, Layer::dim, Layer::vocab,
                       io_.tied_gradient_written, scratch_, scratch_bytes_, io_.context->stream);
  }

 private:
  const std::int32_t* ids() const { return reinterpret_cast<const std::int32_t*>(io_.in); }

  layer_io<typeflow::cuda> io_;
  std::size_t scratch_bytes_;
  std::byte* scratch_ = nullptr;  // the step program's scratchpad
};

// positional_embedding: each row plus its position's; backward writes the
// table's gradient, the batch summed per position (d_in is d_out). In the
// decoder (model::generate) the one row takes run_state::position's, which
// the host reads when it enqueues the call (a decoder is not captured).
template <class Layer, int Batch>
class positional_embedding_executor : public executor_defaults {
  using table = typename Layer::table;

 public:
  explicit positional_embedding_executor(const layer_io<typeflow::cuda>& io) : io_(io) {}

  void forward() {
    if constexpr (Layer::decoding) {
      const std::size_t position = io_.run ? static_cast<std::size_t>(io_.run->position) : 0;
      positional_embedding_forward(io_.in, io_.params + position * table::row_stride, table::row_stride, io_.out,
                                   Batch, 1, Layer::dim, io_.context->stream);
    } else {
      positional_embedding_forward(io_.in, io_.params, table::row_stride, io_.out, Batch, Layer::length, Layer::dim,
                                   io_.context->stream);
    }
  }
  void backward() {
    if constexpr (Layer::decoding) return;  // a decoder is never trained
    const cudaStream_t s = io_.context->stream;
    TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(io_.grads, 0, table::stored_floats * sizeof(float), s));  // unused positions
    positional_embedding_backward(io_.d_out, io_.grads, table::row_stride, Batch, Layer::length, Layer::dim, s);
  }

 private:
  layer_io<typeflow::cuda> io_;
};

// tied_logits: three cuBLASLt products on the embedding's matrix E (vocab,
// stride): logits = x·Eᵀ, d_E = d_logitsᵀ·x (written; the embedding adds its
// part after), d_x = d_logits·E. Under a 16-bit policy the operands are
// converted into scratch at each call (x and E in forward; d_logits, x and E
// in backward) and the products accumulate in float32; the logits, d_E and
// d_x are written in float32 straight from the accumulators, as dense's
// gradients are here (the CPU rounds d_E and d_x to the compute dtype), but
// for the bf16 logits of the network's head under a bfloat16 compute dtype,
// over which the loss writes d_logits in bf16 (layers/embedding.hpp).
template <class Layer, int Batch>
class tied_logits_executor {
  using compute_value = typename Layer::compute_dtype::value_type;  // float, f16 or bf16
  static constexpr bool low_precision = Layer::low_precision;
  static constexpr gemm_precision product_precision = !low_precision ? gemm_precision::float32
                                                      : std::is_same_v<compute_value, typeflow::bf16>
                                                          ? gemm_precision::bfloat16
                                                          : gemm_precision::float16;
  static constexpr int rows = Batch * static_cast<int>(Layer::rows_per_sample);
  static constexpr int vocab = Layer::vocab;
  static constexpr int dim = Layer::dim;
  static constexpr int stride = Layer::stride;
  // The logits' rows (and d_logits'), padded to a multiple of 64 as the
  // network's last layer (layers/embedding.hpp): the products' leading
  // dimension, while their vocabulary extent stays `vocab`.
  static constexpr int row_stride = Layer::row_stride;
  static constexpr std::size_t input_count = static_cast<std::size_t>(rows) * dim;
  static constexpr std::size_t logit_count = static_cast<std::size_t>(rows) * row_stride;
  // bf16 logits, and d_logits over them, as the network's head under a
  // bfloat16 compute dtype (layers/embedding.hpp): the forward product
  // stores bf16, and the backward's products read d_logits as stored.
  static constexpr bool bf16_logits = Layer::bf16_logits;
  // Scratch under a 16-bit policy: [x][E, padded rows as stored][d_logits
  // unless bf16 already], each in the compute dtype.
  static constexpr std::size_t input_bytes =
      low_precision ? scratch_align(input_count * sizeof(compute_value)) : 0;
  static constexpr std::size_t table_bytes =
      low_precision ? scratch_align(Layer::table_floats * sizeof(compute_value)) : 0;
  static constexpr std::size_t logit_bytes =
      low_precision && !bf16_logits ? scratch_align(logit_count * sizeof(compute_value)) : 0;

 public:
  explicit tied_logits_executor(const layer_io<typeflow::cuda>& io)
      : io_(io),
        // logits (rows, V; rows row_stride apart) = x (rows, D) · Eᵀ
        forward_(io.context->lt, {rows, vocab, dim, false, true, 0, stride, row_stride}, product_precision,
                 gemm_epilogue::none, bf16_logits, false, io.context->gemm_workspace_bytes),
        // d_E (V, D) = d_logitsᵀ (V, rows) · x (rows, D), rows of `stride`
        table_grad_(io.context->lt, {vocab, dim, rows, true, false, row_stride, 0, stride}, product_precision,
                    gemm_epilogue::none, false, false, io.context->gemm_workspace_bytes),
        // d_x (rows, D) = d_logits (rows, V) · E (V, D)
        input_grad_(io.context->lt, {rows, dim, vocab, false, false, row_stride, stride}, product_precision,
                    gemm_epilogue::none, false, false, io.context->gemm_workspace_bytes) {}

  std::size_t scratchpad_bytes() const { return input_bytes + table_bytes + logit_bytes; }
  void bind(std::byte* scratchpad) { scratch_ = scratchpad; }

  void forward() {
    const cudaStream_t s = io_.context->stream;
    forward_.run(input(s), table(s), io_.out, nullptr, nullptr, io_.context->gemm_workspace, s);
  }
  void backward() {
    const cudaStream_t s = io_.context->stream;
    const void* d_logits = io_.d_out;  // bf16 as stored, with bf16_logits
    if constexpr (low_precision && !bf16_logits) {
      auto* converted = reinterpret_cast<compute_value*>(scratch_ + input_bytes + table_bytes);
      to_16bit(io_.d_out, converted, logit_count, s);
      d_logits = converted;
    }
    table_grad_.run(d_logits, input(s), io_.tied_grads, nullptr, nullptr, io_.context->gemm_workspace, s);
    if (io_.d_in) input_grad_.run(d_logits, table(s), io_.d_in, nullptr, nullptr, io_.context->gemm_workspace, s);
  }

 private:
  // x and E as the products read them (converted into scratch under a 16-bit policy).
  const void* input(cudaStream_t s) const {
    if constexpr (!low_precision) {
      return io_.in;
    } else {
      auto* converted = reinterpret_cast<compute_value*>(scratch_);
      to_16bit(io_.in, converted, input_count, s);
      return converted;
    }
  }
  const void* table(cudaStream_t s) const {
    if constexpr (!low_precision) {
      return io_.tied_params;
    } else {
      auto* converted = reinterpret_cast<compute_value*>(scratch_ + input_bytes);
      to_16bit(io_.tied_params, converted, Layer::table_floats, s);
      return converted;
    }
  }

  layer_io<typeflow::cuda> io_;
  std::byte* scratch_ = nullptr;  // the step program's scratchpad
  matmul forward_, table_grad_, input_grad_;
};

}  // namespace backend::cuda

template <int Vocab, int Dim, class... Options, class Layer, int Batch>
class executor<embedding<Vocab, Dim, Options...>, Layer, Batch, cuda>
    : public backend::cuda::embedding_executor<Layer, Batch> {
 public:
  using backend::cuda::embedding_executor<Layer, Batch>::embedding_executor;
};
template <int MaxLen, class... Options, class Layer, int Batch>
class executor<positional_embedding<MaxLen, Options...>, Layer, Batch, cuda>
    : public backend::cuda::positional_embedding_executor<Layer, Batch> {
 public:
  using backend::cuda::positional_embedding_executor<Layer, Batch>::positional_embedding_executor;
};
template <class Layer, int Batch>
class executor<tied_logits, Layer, Batch, cuda> : public backend::cuda::tied_logits_executor<Layer, Batch> {
 public:
  using backend::cuda::tied_logits_executor<Layer, Batch>::tied_logits_executor;
};

}  // namespace typeflow

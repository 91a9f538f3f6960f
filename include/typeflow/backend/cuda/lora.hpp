// A LoRA adapter's products on the GPU (layers/lora.hpp), for any layer
// whose product y = x · W it adapts (dense, attention's qkv and proj): the
// six products of backend/cpu/lora.hpp (the formulas are there: t = s x A
// and y += t B forward; dB, u = s d_y Bᵀ, dA and d_x += u Aᵀ backward), as
// cuBLASLt products in float32 (the adapter adds in float32 under every
// policy), chosen once; s is applied by a pass over the thin (rows, r) t and
// u. t is kept from forward to backward in the layer's workspace, u beside
// it. Everything is enqueued on the context's stream.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "typeflow/backend/cuda/context.hpp"
#include "typeflow/backend/cuda/elementwise.hpp"
#include "typeflow/backend/cuda/matmul.hpp"

namespace typeflow::backend::cuda {

class lora_adapter {
 public:
  struct shape {
    int rows = 0, in = 0, out = 0, rank = 0;
    float scale = 1.f;
    int a_stride = 0, b_stride = 0;  // A's and B's padded rows (padded_row_length)
    int x_stride = 0, y_stride = 0;  // 0: the row's length
  };

  lora_adapter() = default;
  lora_adapter(context& ctx, shape s) : shape_(s), workspace_bytes_(ctx.gemm_workspace_bytes) {
    const int x_ld = s.x_stride ? s.x_stride : s.in, y_ld = s.y_stride ? s.y_stride : s.out;
    const auto f32 = gemm_precision::float32;
    const auto none = gemm_epilogue::none;
    down_ = matmul(ctx.lt, {s.rows, s.rank, s.in, false, false, x_ld, s.a_stride, 0}, f32, none, false, false,
                   workspace_bytes_);
    up_ = matmul(ctx.lt, {s.rows, s.out, s.rank, false, false, 0, s.b_stride, y_ld}, f32, none, false, true,
                 workspace_bytes_);
    b_grad_ = matmul(ctx.lt, {s.rank, s.out, s.rows, true, false, 0, y_ld, s.b_stride}, f32, none, false, false,
                     workspace_bytes_);
    back_down_ = matmul(ctx.lt, {s.rows, s.rank, s.out, false, true, y_ld, s.b_stride, 0}, f32, none, false, false,
                        workspace_bytes_);
    a_grad_ = matmul(ctx.lt, {s.in, s.rank, s.rows, true, false, x_ld, 0, s.a_stride}, f32, none, false, false,
                     workspace_bytes_);
    input_grad_ = matmul(ctx.lt, {s.rows, s.in, s.rank, false, true, 0, s.a_stride, x_ld}, f32, none, false, true,
                         workspace_bytes_);
  }

  // y += s x A B; t (rows, r) keeps s x A for backward.
  void forward(const float* x, const float* a, const float* b, float* y, float* t, void* gemm_workspace,
               cudaStream_t stream) const {
    down_.run(x, a, t, nullptr, nullptr, gemm_workspace, stream);
    scale(t, thin(), shape_.scale, stream);
    up_.run(t, b, y, nullptr, nullptr, gemm_workspace, stream);
  }

  // dA, dB written; d_x (null: not wanted) added to; u (rows, r) scratch.
  void backward(const float* x, const float* a, const float* b, const float* t, float* u, const float* d_y,
                float* d_a, float* d_b, float* d_x, void* gemm_workspace, cudaStream_t stream) const {
    b_grad_.run(t, d_y, d_b, nullptr, nullptr, gemm_workspace, stream);
    back_down_.run(d_y, b, u, nullptr, nullptr, gemm_workspace, stream);
    scale(u, thin(), shape_.scale, stream);
    a_grad_.run(x, u, d_a, nullptr, nullptr, gemm_workspace, stream);
    if (d_x) input_grad_.run(u, a, d_x, nullptr, nullptr, gemm_workspace, stream);
  }

  // The bytes of t or u.
  static std::size_t thin_bytes(int rows, int rank) {
    return scratch_align(static_cast<std::size_t>(rows) * static_cast<std::size_t>(rank) * sizeof(float));
  }

 private:
  std::size_t thin() const { return static_cast<std::size_t>(shape_.rows) * static_cast<std::size_t>(shape_.rank); }

  shape shape_;
  std::size_t workspace_bytes_ = 0;
  matmul down_, up_, b_grad_, back_down_, a_grad_, input_grad_;
};

}  // namespace typeflow::backend::cuda

// The CPU gemm: oneDNN's matmul primitive behind one small interface.
//
//   C (m, n) = op(A) (m, k) · op(B) (k, n)  [+ bias (n)]  [then epilogue]
//   or, with accumulate, C += op(A) · op(B); with a scale s, s · op(A) · op(B)
//
// The operands are float32, or (gemm_storage) A and B in bfloat16 with C in
// float32 or bfloat16: float32 accumulation either way, the bias (float32)
// and the epilogue applied before C is rounded (backend/cpu/products_16bit.hpp
// says when a model uses them).
//
// op() is a transpose expressed through strides, so no operand is copied. The
// primitive is created once (at set-up), bound once to fixed arena addresses,
// and then run every step with a user-managed scratchpad: nothing is created
// in the step. The CUDA backend's cuBLASLt matmul plugs in behind the same
// gemm_shape / epilogue description.
#pragma once

#include "typeflow/backend/cpu/context.hpp"
#include "typeflow/core/gemm.hpp"

#if !TYPEFLOW_HAS_ONEDNN_CPP
#error "typeflow/backend/cpu/matmul.hpp needs oneDNN's C++ header, which nvcc 13 cannot compile (see backend/cpu/context.hpp): CPU executors belong in .cpp files"
#endif

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>

#include <oneapi/dnnl/dnnl.hpp>

#include "typeflow/core/foreign_calls.hpp"

namespace typeflow {
namespace backend::cpu {

// How a product's operands are stored.
struct gemm_storage {
  bool bf16_operands = false;  // A and B
  bool bf16_result = false;    // C
};

class matmul {
 public:
  matmul() = default;

  matmul(context& ctx, gemm_shape shape, bool with_bias, epilogue after = epilogue::none,
         bool accumulate = false, float scale = 1.f, gemm_storage storage = {})
      : ctx_(&ctx), shape_(shape), with_bias_(with_bias) {
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    const dnnl::memory::dim m = shape.m, n = shape.n, k = shape.k;
    const dnnl::memory::dim lda = shape.lda ? shape.lda : (shape.transpose_a ? m : k);
    const dnnl::memory::dim ldb = shape.ldb ? shape.ldb : (shape.transpose_b ? k : n);
    const dnnl::memory::dim ldc = shape.ldc ? shape.ldc : n;
    const dt operands = storage.bf16_operands ? dt::bf16 : dt::f32;
    a_md_ = dnnl::memory::desc({m, k}, operands, shape.transpose_a ? dims{1, lda} : dims{lda, 1});
    b_md_ = dnnl::memory::desc({k, n}, operands, shape.transpose_b ? dims{1, ldb} : dims{ldb, 1});
    c_md_ = dnnl::memory::desc({m, n}, storage.bf16_result ? dt::bf16 : dt::f32, dims{ldc, 1});
    bias_md_ = with_bias ? dnnl::memory::desc({1, n}, dt::f32, dims{n, 1}) : dnnl::memory::desc();

    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (scale != 1.f) attr.set_output_scales(0, {scale});
    dnnl::post_ops ops;
    if (accumulate) ops.append_sum(1.f);
    if (after != epilogue::none) ops.append_eltwise(1.f, algorithm_of(after), 0.f, 0.f);
    attr.set_post_ops(ops);
    try {
      pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md_, b_md_, bias_md_, c_md_), attr,
                                         ctx.engine);
    } catch (const dnnl::error& e) {
      throw std::runtime_error("typeflow: oneDNN has no " + std::string(storage.bf16_operands ? "bfloat16" : "float32") +
                               " matmul for (" + std::to_string(m) + " x " + std::to_string(k) + ") · (" +
                               std::to_string(k) + " x " + std::to_string(n) + "): " + e.what());
    }
    primitive_ = dnnl::matmul(pd_);
  }

  std::size_t scratchpad_bytes() const { return pd_ ? pd_.scratchpad_desc().get_size() : 0; }
  const char* implementation() const { return pd_ ? pd_.impl_info_str() : "none"; }

  // Fixes the operands' addresses (of the storage's types); run() then only executes.
  void bind(const void* a, const void* b, const float* bias, void* c, std::byte* scratchpad) {
    auto& engine = ctx_->engine;
    a_ = dnnl::memory(a_md_, engine, const_cast<void*>(a));
    b_ = dnnl::memory(b_md_, engine, const_cast<void*>(b));
    c_ = dnnl::memory(c_md_, engine, c);
    scratch_ = dnnl::memory(pd_.scratchpad_desc(), engine, scratchpad);
    args_[0] = {DNNL_ARG_SRC, a_.get()};
    args_[1] = {DNNL_ARG_WEIGHTS, b_.get()};
    args_[2] = {DNNL_ARG_DST, c_.get()};
    args_[3] = {DNNL_ARG_SCRATCHPAD, scratch_.get()};
    arg_count_ = 4;
    if (with_bias_) {
      bias_ = dnnl::memory(bias_md_, engine, const_cast<float*>(bias));
      args_[arg_count_++] = {DNNL_ARG_BIAS, bias_.get()};
    }
  }

  void run() const {
    detail::foreign_call_scope foreign;
    const dnnl_status_t status =
        dnnl_primitive_execute(primitive_.get(), ctx_->stream.get(), arg_count_, args_.data());
    if (status != dnnl_success)
      throw std::runtime_error("typeflow: oneDNN matmul failed with status " + std::to_string(status));
  }

  const gemm_shape& shape() const { return shape_; }

 private:
  static dnnl::algorithm algorithm_of(epilogue e) {
    switch (e) {
      case epilogue::relu: return dnnl::algorithm::eltwise_relu;
      case epilogue::tanh: return dnnl::algorithm::eltwise_tanh;
      case epilogue::sigmoid: return dnnl::algorithm::eltwise_logistic;
      case epilogue::none: break;
    }
    return dnnl::algorithm::undef;
  }

  context* ctx_ = nullptr;
  gemm_shape shape_{};
  bool with_bias_ = false;
  dnnl::memory::desc a_md_, b_md_, c_md_, bias_md_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul primitive_;
  dnnl::memory a_, b_, c_, bias_, scratch_;
  std::array<dnnl_exec_arg_t, 5> args_{};
  int arg_count_ = 0;
};

}  // namespace backend::cpu
}  // namespace typeflow

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
// in the step.
//
// A bf16 product wide enough is split by columns into one part per thread,
// each a single-threaded oneDNN matmul on its slice of B, C and the bias (a
// primitive run inside an OpenMP team runs on its calling thread). oneDNN
// 2.6's bf16 brgemm shares a product between 2 threads unevenly at the
// shapes of a training step; the parts, which it runs with gemm:jit, do
// not wait on each other. On the 2-core AVX512-BF16 machine, oneDNN alone
// at the shapes of the MLP 784-1024-1024-10 at batch 256: 640-760 GFLOP/s
// whole, 770-820 split; its bf16 step went from 5.41 to 4.89 ms. float32
// products stay whole: split, they gained at some shapes and lost at others.
// The CUDA backend's cuBLASLt matmul plugs in behind the same
// gemm_shape / epilogue description.
#pragma once

#include "typeflow/backend/cpu/context.hpp"
#include "typeflow/core/gemm.hpp"

#if !TYPEFLOW_HAS_ONEDNN_CPP
#error "typeflow/backend/cpu/matmul.hpp needs oneDNN's C++ header, which nvcc 13 cannot compile (see backend/cpu/context.hpp): CPU executors belong in .cpp files"
#endif

#include <algorithm>
#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

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
    if (storage.bf16_operands) split_by_columns(attr);
  }

  std::size_t scratchpad_bytes() const {
    if (!parts_.empty()) return parts_.size() * part_scratchpad_;
    return pd_ ? pd_.scratchpad_desc().get_size() : 0;
  }
  const char* implementation() const {
    if (!parts_.empty()) return parts_.front().pd.impl_info_str();
    return pd_ ? pd_.impl_info_str() : "none";
  }
  // The column parts run on their own threads (1: the product runs whole).
  std::size_t parts() const { return parts_.empty() ? 1 : parts_.size(); }

  // Fixes the operands' addresses (of the storage's types); run() then only executes.
  void bind(const void* a, const void* b, const float* bias, void* c, std::byte* scratchpad) {
    auto& engine = ctx_->engine;
    if (!parts_.empty()) return bind_parts(a, b, bias, c, scratchpad);
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
    if (!parts_.empty()) return run_parts();
    check(dnnl_primitive_execute(primitive_.get(), ctx_->stream.get(), arg_count_, args_.data()));
  }

  const gemm_shape& shape() const { return shape_; }

 private:
  static dnnl::algorithm algorithm_of(epilogue e) {
    switch (e) {
      case epilogue::relu: return dnnl::algorithm::eltwise_relu;
      case epilogue::tanh: return dnnl::algorithm::eltwise_tanh;
      case epilogue::sigmoid: return dnnl::algorithm::eltwise_logistic;
      case epilogue::gelu_tanh: return dnnl::algorithm::eltwise_gelu_tanh;
      case epilogue::none: break;
    }
    return dnnl::algorithm::undef;
  }

  static void check(dnnl_status_t status) {
    if (status != dnnl_success)
      throw std::runtime_error("typeflow: oneDNN matmul failed with status " + std::to_string(status));
  }

  // One thread's columns [first, first + width) of the product.
  struct part {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul primitive;
    dnnl::memory::dim first = 0, width = 0;
    dnnl::memory a, b, c, bias, scratch;
    std::array<dnnl_exec_arg_t, 5> args{};
    int arg_count = 0;
  };
  static constexpr dnnl::memory::dim min_part_width = 256;

  // Splits the product into one column part per thread, when each part is at
  // least min_part_width wide and oneDNN runs the parts with gemm:jit (a
  // brgemm part inside the team measured several times slower).
  void split_by_columns(const dnnl::primitive_attr& attr) {
#ifdef _OPENMP
    const int threads = omp_get_max_threads();
    const dnnl::memory::dim n = shape_.n;
    if (threads < 2 || n / threads < min_part_width) return;
    const dnnl::memory::dim width = (n / threads + 15) / 16 * 16;  // whole cache lines of C
    std::vector<part> parts(static_cast<std::size_t>(threads));
    dnnl::memory::dim first = 0;
    for (part& p : parts) {
      p.first = first;
      p.width = std::min(width, n - first);
      first += p.width;
      if (p.width <= 0) return;
    }
    try {
      for (part& p : parts) {
        if (&p != &parts.front() && p.width == parts.front().width) {
          p.pd = parts.front().pd;
        } else {
          p.pd = dnnl::matmul::primitive_desc(
              dnnl::matmul::desc(a_md_, column_slice(b_md_, p.width), with_bias_ ? column_slice(bias_md_, p.width) : bias_md_,
                                 column_slice(c_md_, p.width)),
              attr, ctx_->engine);
          if (std::string(p.pd.impl_info_str()).find("gemm") == std::string::npos) return;
        }
        p.primitive = dnnl::matmul(p.pd);
        part_scratchpad_ = std::max(part_scratchpad_, (p.pd.scratchpad_desc().get_size() + 63) / 64 * 64);
      }
    } catch (const dnnl::error&) {
      return;  // the whole product stays
    }
    parts_ = std::move(parts);
#else
    (void)attr;
#endif
  }

  // A (rows, width) view with the strides of the (rows, n) desc.
  static dnnl::memory::desc column_slice(const dnnl::memory::desc& whole, dnnl::memory::dim width) {
    const dnnl::memory::dims dims = whole.dims();
    const dnnl_memory_desc_t& c = whole.data;
    const dnnl::memory::dims strides(c.format_desc.blocking.strides, c.format_desc.blocking.strides + c.ndims);
    return dnnl::memory::desc({dims[0], width}, whole.data_type(), strides);
  }

  void bind_parts(const void* a, const void* b, const float* bias, void* c, std::byte* scratchpad) {
    auto& engine = ctx_->engine;
    const std::size_t operand_bytes = b_md_.data_type() == dnnl::memory::data_type::bf16 ? 2 : 4;
    const std::size_t result_bytes = c_md_.data_type() == dnnl::memory::data_type::bf16 ? 2 : 4;
    const dnnl::memory::dim b_column_stride = b_md_.data.format_desc.blocking.strides[1];
    for (std::size_t i = 0; i < parts_.size(); ++i) {
      part& p = parts_[i];
      const auto column = static_cast<std::size_t>(p.first);
      p.a = dnnl::memory(p.pd.src_desc(), engine, const_cast<void*>(a));
      p.b = dnnl::memory(p.pd.weights_desc(), engine,
                         const_cast<char*>(static_cast<const char*>(b)) +
                             column * static_cast<std::size_t>(b_column_stride) * operand_bytes);
      p.c = dnnl::memory(p.pd.dst_desc(), engine, static_cast<char*>(c) + column * result_bytes);
      p.scratch = dnnl::memory(p.pd.scratchpad_desc(), engine, scratchpad + i * part_scratchpad_);
      p.args[0] = {DNNL_ARG_SRC, p.a.get()};
      p.args[1] = {DNNL_ARG_WEIGHTS, p.b.get()};
      p.args[2] = {DNNL_ARG_DST, p.c.get()};
      p.args[3] = {DNNL_ARG_SCRATCHPAD, p.scratch.get()};
      p.arg_count = 4;
      if (with_bias_) {
        p.bias = dnnl::memory(p.pd.bias_desc(), engine, const_cast<float*>(bias) + column);
        p.args[static_cast<std::size_t>(p.arg_count++)] = {DNNL_ARG_BIAS, p.bias.get()};
      }
    }
  }

  // Each part on a thread of its own, as many as the caller may use now (a
  // mirrored replica's thread may use fewer than at set-up); a smaller team
  // runs the rest in turn.
  void run_parts() const {
    int failed = dnnl_success;
    const int count = static_cast<int>(parts_.size());
#ifdef _OPENMP
    const int threads = std::min(count, omp_get_max_threads());
#else
    const int threads = 1;
#endif
#pragma omp parallel num_threads(threads) reduction(max : failed)
    {
#ifdef _OPENMP
      for (int i = omp_get_thread_num(); i < count; i += omp_get_num_threads()) {
        const part& p = parts_[static_cast<std::size_t>(i)];
        failed = std::max(failed, static_cast<int>(dnnl_primitive_execute(p.primitive.get(), ctx_->stream.get(),
                                                                          p.arg_count, p.args.data())));
      }
#endif
    }
    check(static_cast<dnnl_status_t>(failed));
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
  std::vector<part> parts_;  // empty: the product runs whole
  std::size_t part_scratchpad_ = 0;
};

}  // namespace backend::cpu
}  // namespace typeflow

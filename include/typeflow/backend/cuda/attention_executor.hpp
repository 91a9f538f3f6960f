// causal_self_attention on tf::cuda: its executor. The two projections are
// cuBLASLt products with their bias in the epilogue (backend/cuda/matmul.hpp),
// the heads between them the kernels of backend/cuda/attention.hpp, which
// never store the (T, T) probabilities. backend/cuda/layers.hpp includes this.
//
// Under a 16-bit policy (mixed_float16, mixed_bfloat16) the products take
// 16-bit operands and accumulate in float32, and the values are rounded to
// the compute dtype where the CPU layer rounds them: qkv, P, P', y, the
// output, d_y and d_S (d_qkv enters its products in 16 bits). The parameters'
// gradients and d_x are written in float32 straight from the accumulators,
// as dense's are here.
//
// With lora<> both kernels are frozen and the layer computes in float32 (as
// on the CPU): each projection gets its adapter (backend/cuda/lora.hpp),
// which adds to qkv and to the output forward, and to d_y and d_x backward;
// the biases' gradients are column sums.
//
// Workspace (kept from forward to backward), inside the CPU layer's plan:
//   qkv (rows, 3D) | y (rows, D) | statistics (Batch, H, T, 2)
//   [lora<>: the qkv adapter's t and u | the proj adapter's t and u, (rows, Rank) each]
// Scratch (one call): d_y (rows, D) | d_qkv (rows, 3D) | δ (Batch, H, T),
// and under a 16-bit policy the products' 16-bit operands after them.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "typeflow/backend/cuda/attention.hpp"
#include "typeflow/backend/cuda/column_sums.hpp"
#include "typeflow/backend/cuda/context.hpp"
#include "typeflow/backend/cuda/elementwise.hpp"
#include "typeflow/backend/cuda/lora.hpp"
#include "typeflow/backend/cuda/matmul.hpp"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/layers/attention.hpp"
#include "typeflow/layers/dropout_mask.hpp"
#include "typeflow/contract/executor.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {
namespace backend::cuda {

// How both attention executors compute under the layer's policy: the
// products' precision, and where the kernels round (none in float32).
template <class Layer>
struct attention_precision {
  using compute_value = typename Layer::compute_dtype::value_type;  // float, f16 or bf16
  static constexpr bool low_precision = Layer::low_precision;
  static constexpr bool bf16 = std::is_same_v<compute_value, typeflow::bf16>;
  static constexpr gemm_precision product_precision =
      !low_precision ? gemm_precision::float32 : bf16 ? gemm_precision::bfloat16 : gemm_precision::float16;
  static constexpr attention_rounding rounding =
      !low_precision ? attention_rounding::none : bf16 ? attention_rounding::bfloat16 : attention_rounding::float16;
};

template <class Layer, int Batch>
class attention_executor {
  using params = typename Layer::params;
  using policy = attention_precision<Layer>;
  using compute_value = typename policy::compute_value;  // float, f16 or bf16
  static constexpr bool low_precision = policy::low_precision;
  static constexpr gemm_precision product_precision = policy::product_precision;
  static constexpr attention_rounding rounding = policy::rounding;
  static constexpr int T = Layer::steps, D = Layer::width, H = Layer::heads, hd = Layer::head_width;
  static constexpr int rows = Batch * T;
  static constexpr int qkv_stride = static_cast<int>(std::tuple_element_t<0, typename params::tuple>::row_stride);
  static constexpr int proj_stride = static_cast<int>(std::tuple_element_t<2, typename params::tuple>::row_stride);
  static constexpr std::size_t qkv_kernel_floats = std::tuple_element_t<0, typename params::tuple>::stored_floats;
  static constexpr std::size_t proj_kernel_floats = std::tuple_element_t<2, typename params::tuple>::stored_floats;
  static constexpr std::size_t rows_d = static_cast<std::size_t>(rows) * D;
  static constexpr std::size_t row_heads = static_cast<std::size_t>(Batch) * H * T;

  // Workspace: qkv | y | statistics.
  static constexpr std::size_t y_at = scratch_align(3 * rows_d * sizeof(float));
  static constexpr std::size_t statistics_at = y_at + scratch_align(rows_d * sizeof(float));
  static constexpr bool with_lora = Layer::with_lora;
  static constexpr std::size_t thin_bytes =
      with_lora ? scratch_align(static_cast<std::size_t>(rows) * Layer::lora_rank * sizeof(float)) : 0;
  static constexpr std::size_t lora_at = statistics_at + scratch_align(2 * row_heads * sizeof(float));
  static constexpr std::size_t workspace_used =
      with_lora ? lora_at + 4 * thin_bytes : statistics_at + 2 * row_heads * sizeof(float);
  static_assert(workspace_used <= Batch * Layer::workspace_bytes_per_sample + Layer::workspace_bytes_per_step,
                "causal_self_attention on tf::cuda: qkv, y and the row statistics exceed the layer's workspace");

  // Scratch: d_y | d_qkv | δ | [16 bits: x | y | d_out | d_qkv | qkv.kernel | proj.kernel | a bias].
  static constexpr std::size_t d_qkv_at = scratch_align(rows_d * sizeof(float));
  static constexpr std::size_t delta_at = d_qkv_at + scratch_align(3 * rows_d * sizeof(float));
  static constexpr std::size_t sixteen_at = delta_at + scratch_align(row_heads * sizeof(float));
  static constexpr std::size_t half_rows = scratch_align(rows_d * sizeof(compute_value));
  static constexpr std::size_t x16_at = sixteen_at;
  static constexpr std::size_t y16_at = x16_at + half_rows;
  static constexpr std::size_t d_out16_at = y16_at + half_rows;
  static constexpr std::size_t d_qkv16_at = d_out16_at + half_rows;
  static constexpr std::size_t qkv_kernel16_at = d_qkv16_at + scratch_align(3 * rows_d * sizeof(compute_value));
  static constexpr std::size_t proj_kernel16_at =
      qkv_kernel16_at + scratch_align(qkv_kernel_floats * sizeof(compute_value));
  static constexpr std::size_t bias_at = proj_kernel16_at + scratch_align(proj_kernel_floats * sizeof(compute_value));
  static constexpr std::size_t scratch_used =
      low_precision ? bias_at + scratch_align(3 * static_cast<std::size_t>(D) * sizeof(float)) : sixteen_at;

 public:
  explicit attention_executor(const layer_io<typeflow::cuda>& io)
      : io_(io),
        seed_(io.run ? attention_dropout_seed(io.run->seed, io.salt) : 0),
        // qkv (rows, 3D) = x (rows, D) · qkv.kernel (D, 3D) + qkv.bias
        qkv_forward_(io.context->lt, {rows, 3 * D, D, false, false, 0, qkv_stride}, product_precision,
                     gemm_epilogue::bias, false, false, io.context->gemm_workspace_bytes),
        // out (rows, D) = y (rows, D) · proj.kernel (D, D) + proj.bias
        proj_forward_(io.context->lt, {rows, D, D, false, false, 0, proj_stride}, product_precision,
                      gemm_epilogue::bias, false, false, io.context->gemm_workspace_bytes),
        // d proj.kernel (D, D) = yᵀ · d_out, d proj.bias its column sums
        proj_kernel_grad_(io.context->lt, {D, D, rows, true, false, 0, 0, proj_stride}, product_precision,
                          gemm_epilogue::bias_gradient, false, false, io.context->gemm_workspace_bytes),
        // d_y (rows, D) = d_out · proj.kernelᵀ
        proj_input_grad_(io.context->lt, {rows, D, D, false, true, 0, proj_stride}, product_precision,
                         gemm_epilogue::none, false, false, io.context->gemm_workspace_bytes),
        // d qkv.kernel (D, 3D) = xᵀ · d_qkv, d qkv.bias its column sums
        qkv_kernel_grad_(io.context->lt, {D, 3 * D, rows, true, false, 0, 0, qkv_stride}, product_precision,
                         gemm_epilogue::bias_gradient, false, false, io.context->gemm_workspace_bytes),
        // d_x (rows, D) = d_qkv · qkv.kernelᵀ
        qkv_input_grad_(io.context->lt, {rows, D, 3 * D, false, true, 0, qkv_stride}, product_precision,
                        gemm_epilogue::none, false, false, io.context->gemm_workspace_bytes) {
    if constexpr (with_lora) {
      constexpr int r = Layer::lora_rank;
      constexpr float scale = Layer::lora_type::scale;
      qkv_adapter_ = lora_adapter(*io.context, {rows, D, 3 * D, r, scale, row_stride<4>, row_stride<5>, 0, 0});
      proj_adapter_ = lora_adapter(*io.context, {rows, D, D, r, scale, row_stride<6>, row_stride<7>, 0, 0});
    }
  }

  std::size_t scratchpad_bytes() const { return scratch_used; }
  void bind(std::byte* scratchpad) { scratch_ = scratchpad; }

  void forward() {
    const cudaStream_t s = io_.context->stream;
    dropping_ = Layer::with_dropout && io_.run && io_.run->training;
    if constexpr (!low_precision) {
      qkv_forward_.run(io_.in, param<0>(), qkv(), param<1>(), nullptr, io_.context->gemm_workspace, s);
      if constexpr (with_lora)
        qkv_adapter_.forward(io_.in, param<4>(), param<5>(), qkv(), lora_buffer(0), io_.context->gemm_workspace, s);
    } else {
      map(param<1>(), bias(), 3 * D, round_fn<compute_value>{}, s);
      qkv_forward_.run(sixteen(io_.in, x16_at, rows_d, s), sixteen(param<0>(), qkv_kernel16_at, qkv_kernel_floats, s),
                       qkv(), bias(), nullptr, io_.context->gemm_workspace, s);
      map(qkv(), qkv(), 3 * rows_d, round_fn<compute_value>{}, s);
    }
    attention_forward(qkv(), y(), statistics(), shape(), dropout(), rounding, s);
    if constexpr (!low_precision) {
      proj_forward_.run(y(), param<2>(), io_.out, param<3>(), nullptr, io_.context->gemm_workspace, s);
      if constexpr (with_lora)
        proj_adapter_.forward(y(), param<6>(), param<7>(), io_.out, lora_buffer(2), io_.context->gemm_workspace, s);
    } else {
      map(y(), y(), rows_d, round_fn<compute_value>{}, s);
      map(param<3>(), bias(), D, round_fn<compute_value>{}, s);
      proj_forward_.run(sixteen(y(), y16_at, rows_d, s), sixteen(param<2>(), proj_kernel16_at, proj_kernel_floats, s),
                        io_.out, bias(), nullptr, io_.context->gemm_workspace, s);
      map(io_.out, io_.out, rows_d, round_fn<compute_value>{}, s);
    }
  }

  void backward() {
    const cudaStream_t s = io_.context->stream;
    void* ws = io_.context->gemm_workspace;
    if constexpr (with_lora) {
      column_sums(io_.d_out, grad<3>(), static_cast<std::size_t>(rows), D, s);
      proj_input_grad_.run(io_.d_out, param<2>(), d_y(), nullptr, nullptr, ws, s);
      proj_adapter_.backward(y(), param<6>(), param<7>(), lora_buffer(2), lora_buffer(3), io_.d_out, grad<6>(),
                             grad<7>(), d_y(), ws, s);  // adds to d_y
    } else if constexpr (!low_precision) {
      proj_kernel_grad_.run(y(), io_.d_out, grad<2>(), nullptr, grad<3>(), ws, s);
      proj_input_grad_.run(io_.d_out, param<2>(), d_y(), nullptr, nullptr, ws, s);
    } else {
      const void* d_out = sixteen(io_.d_out, d_out16_at, rows_d, s);
      proj_kernel_grad_.run(sixteen(y(), y16_at, rows_d, s), d_out, grad<2>(), nullptr, grad<3>(), ws, s);
      proj_input_grad_.run(d_out, sixteen(param<2>(), proj_kernel16_at, proj_kernel_floats, s), d_y(), nullptr,
                           nullptr, ws, s);
      map(d_y(), d_y(), rows_d, round_fn<compute_value>{}, s);
    }
    attention_backward(qkv(), d_y(), statistics(), delta(), d_qkv(), shape(), dropout(), rounding, s);
    if constexpr (with_lora) {
      column_sums(d_qkv(), grad<1>(), static_cast<std::size_t>(rows), 3 * D, s);
      if (io_.d_in) qkv_input_grad_.run(d_qkv(), param<0>(), io_.d_in, nullptr, nullptr, ws, s);
      qkv_adapter_.backward(io_.in, param<4>(), param<5>(), lora_buffer(0), lora_buffer(1), d_qkv(), grad<4>(),
                            grad<5>(), io_.d_in, ws, s);  // after d_x is written: adds to it
    } else if constexpr (!low_precision) {
      qkv_kernel_grad_.run(io_.in, d_qkv(), grad<0>(), nullptr, grad<1>(), ws, s);
      if (io_.d_in) qkv_input_grad_.run(d_qkv(), param<0>(), io_.d_in, nullptr, nullptr, ws, s);
    } else {
      const void* d_qkv16 = sixteen(d_qkv(), d_qkv16_at, 3 * rows_d, s);
      qkv_kernel_grad_.run(sixteen(io_.in, x16_at, rows_d, s), d_qkv16, grad<0>(), nullptr, grad<1>(), ws, s);
      if (io_.d_in)
        qkv_input_grad_.run(d_qkv16, sixteen(param<0>(), qkv_kernel16_at, qkv_kernel_floats, s), io_.d_in, nullptr,
                            nullptr, ws, s);
    }
  }

 private:
  template <std::size_t I>
  float* param() const {
    return param_data<params, I>(io_);  // the frozen kernels with lora<>
  }
  template <std::size_t I>
  float* grad() const {
    return param_gradient<params, I>(io_);
  }
  template <std::size_t P>
  static constexpr int row_stride = static_cast<int>(std::tuple_element_t<P, typename params::tuple>::row_stride);
  // lora<>'s (rows, Rank) buffers: 0, 1 the qkv adapter's t and u; 2, 3 the proj adapter's.
  float* lora_buffer(int i) const { return reinterpret_cast<float*>(io_.workspace + lora_at + i * thin_bytes); }
  float* qkv() const { return reinterpret_cast<float*>(io_.workspace); }
  float* y() const { return reinterpret_cast<float*>(io_.workspace + y_at); }
  float* statistics() const { return reinterpret_cast<float*>(io_.workspace + statistics_at); }
  float* d_y() const { return reinterpret_cast<float*>(scratch_); }
  float* d_qkv() const { return reinterpret_cast<float*>(scratch_ + d_qkv_at); }
  float* delta() const { return reinterpret_cast<float*>(scratch_ + delta_at); }
  float* bias() const { return reinterpret_cast<float*>(scratch_ + bias_at); }
  // from (n floats) in the compute dtype, in scratch at `at`.
  const void* sixteen(const float* from, std::size_t at, std::size_t n, cudaStream_t s) const {
    auto* to = reinterpret_cast<compute_value*>(scratch_ + at);
    to_16bit(from, to, n, s);
    return to;
  }

  static attention_shape shape() {
    return {Batch, T, H, hd, static_cast<float>(1.0 / std::sqrt(double{hd}))};
  }
  attention_dropout dropout() const {
    if (!dropping_) return {};
    return {Layer::attention_dropout_rate, dropout_draw{seed_, 0, &io_.context->step->step}};
  }

  layer_io<typeflow::cuda> io_;
  std::uint64_t seed_;  // the mask's key, fixed per replica; the step comes from device memory
  std::byte* scratch_ = nullptr;  // the step program's scratchpad
  bool dropping_ = false;         // forward's choice, which backward repeats
  matmul qkv_forward_, proj_forward_, proj_kernel_grad_, proj_input_grad_, qkv_kernel_grad_, qkv_input_grad_;
  lora_adapter qkv_adapter_, proj_adapter_;  // with lora<> only
};

// The decoder's attention (model::generate; Layer::decoding): one position
// per sample and call, at run_state::position. The projections as in
// training, on Batch rows; between them attention_decode writes the
// position's k and v into the caches, which the workspace keeps from call
// to call (the CPU layer's layout: per sample (decode_length, D) keys, then
// values), and attends over positions 0..position. Nothing backward.
template <class Layer, int Batch>
class attention_decode_executor {
  using params = typename Layer::params;
  using policy = attention_precision<Layer>;
  using compute_value = typename policy::compute_value;  // float, f16 or bf16
  static constexpr bool low_precision = policy::low_precision;
  static constexpr gemm_precision product_precision = policy::product_precision;
  static constexpr attention_rounding rounding = policy::rounding;
  static constexpr int D = Layer::width, H = Layer::heads, hd = Layer::head_width;
  static constexpr int length = Layer::decode_length;
  static constexpr int qkv_stride = static_cast<int>(std::tuple_element_t<0, typename params::tuple>::row_stride);
  static constexpr int proj_stride = static_cast<int>(std::tuple_element_t<2, typename params::tuple>::row_stride);
  static constexpr std::size_t qkv_kernel_floats = std::tuple_element_t<0, typename params::tuple>::stored_floats;
  static constexpr std::size_t proj_kernel_floats = std::tuple_element_t<2, typename params::tuple>::stored_floats;
  static constexpr std::size_t rows_d = static_cast<std::size_t>(Batch) * D;
  static_assert(2 * static_cast<std::size_t>(Batch) * length * D * sizeof(float) <=
                    Batch * Layer::workspace_bytes_per_sample + Layer::workspace_bytes_per_step,
                "causal_self_attention on tf::cuda: the key and value caches exceed the layer's workspace");

  // Scratch: qkv (Batch, 3D) | y (Batch, D) | [16 bits: x | y | qkv.kernel | proj.kernel | a bias].
  static constexpr std::size_t y_at = scratch_align(3 * rows_d * sizeof(float));
  static constexpr std::size_t sixteen_at = y_at + scratch_align(rows_d * sizeof(float));
  static constexpr std::size_t half_rows = scratch_align(rows_d * sizeof(compute_value));
  static constexpr std::size_t x16_at = sixteen_at, y16_at = x16_at + half_rows;
  static constexpr std::size_t qkv_kernel16_at = y16_at + half_rows;
  static constexpr std::size_t proj_kernel16_at =
      qkv_kernel16_at + scratch_align(qkv_kernel_floats * sizeof(compute_value));
  static constexpr std::size_t bias_at = proj_kernel16_at + scratch_align(proj_kernel_floats * sizeof(compute_value));
  static constexpr std::size_t scratch_used =
      low_precision ? bias_at + scratch_align(3 * static_cast<std::size_t>(D) * sizeof(float)) : sixteen_at;

 public:
  explicit attention_decode_executor(const layer_io<typeflow::cuda>& io)
      : io_(io),
        qkv_forward_(io.context->lt, {Batch, 3 * D, D, false, false, 0, qkv_stride}, product_precision,
                     gemm_epilogue::bias, false, false, io.context->gemm_workspace_bytes),
        proj_forward_(io.context->lt, {Batch, D, D, false, false, 0, proj_stride}, product_precision,
                      gemm_epilogue::bias, false, false, io.context->gemm_workspace_bytes) {}

  std::size_t scratchpad_bytes() const { return scratch_used; }
  void bind(std::byte* scratchpad) { scratch_ = scratchpad; }

  void forward() {
    const cudaStream_t s = io_.context->stream;
    void* ws = io_.context->gemm_workspace;
    float* qkv = reinterpret_cast<float*>(scratch_);
    float* y = reinterpret_cast<float*>(scratch_ + y_at);
    if constexpr (!low_precision) {
      qkv_forward_.run(io_.in, param<0>(), qkv, param<1>(), nullptr, ws, s);
    } else {
      map(param<1>(), bias(), 3 * D, round_fn<compute_value>{}, s);
      qkv_forward_.run(sixteen(io_.in, x16_at, rows_d, s), sixteen(param<0>(), qkv_kernel16_at, qkv_kernel_floats, s),
                       qkv, bias(), nullptr, ws, s);
      map(qkv, qkv, 3 * rows_d, round_fn<compute_value>{}, s);
    }
    const attention_shape shape{Batch, length, H, hd, static_cast<float>(1.0 / std::sqrt(double{hd}))};
    attention_decode(qkv, reinterpret_cast<float*>(io_.workspace), y, shape, io_.run ? io_.run->position : 0,
                     rounding, s);
    if constexpr (!low_precision) {
      proj_forward_.run(y, param<2>(), io_.out, param<3>(), nullptr, ws, s);
    } else {
      map(y, y, rows_d, round_fn<compute_value>{}, s);
      map(param<3>(), bias(), D, round_fn<compute_value>{}, s);
      proj_forward_.run(sixteen(y, y16_at, rows_d, s), sixteen(param<2>(), proj_kernel16_at, proj_kernel_floats, s),
                        io_.out, bias(), nullptr, ws, s);
      map(io_.out, io_.out, rows_d, round_fn<compute_value>{}, s);
    }
  }
  void backward() {}  // a decoder is never trained

 private:
  template <std::size_t I>
  float* param() const {
    return param_data<params, I>(io_);
  }
  float* bias() const { return reinterpret_cast<float*>(scratch_ + bias_at); }
  const void* sixteen(const float* from, std::size_t at, std::size_t n, cudaStream_t s) const {
    auto* to = reinterpret_cast<compute_value*>(scratch_ + at);
    to_16bit(from, to, n, s);
    return to;
  }

  layer_io<typeflow::cuda> io_;
  std::byte* scratch_ = nullptr;  // the step program's scratchpad
  matmul qkv_forward_, proj_forward_;
};

}  // namespace backend::cuda

template <int Heads, class... Options, class Layer, int Batch>
class executor<causal_self_attention<Heads, Options...>, Layer, Batch, cuda>
    : public std::conditional_t<Layer::decoding, backend::cuda::attention_decode_executor<Layer, Batch>,
                                backend::cuda::attention_executor<Layer, Batch>> {
  using base = std::conditional_t<Layer::decoding, backend::cuda::attention_decode_executor<Layer, Batch>,
                                  backend::cuda::attention_executor<Layer, Batch>>;
  static_assert(executor_check<layer_spec<causal_self_attention<Heads, Options...>>, on_device<cuda>,
                               !(Layer::decoding && Layer::with_lora)>::passed,
                "causal_self_attention<Heads, lora<...>>: decoding (model::generate) with adapters runs on the CPU "
                "only for now (merge_lora gives the plain model, which decodes on the GPU)");
  static_assert(executor_check<layer_spec<causal_self_attention<Heads, Options...>>, on_device<cuda>,
                               (Layer::head_width <= backend::cuda::attention_max_head_width)>::passed,
                "causal_self_attention on tf::cuda: the head width D / Heads must be at most 128");

 public:
  using base::base;
};

}  // namespace typeflow

// The layers' CUDA executors: executor<Spec, Layer, Batch, cuda>
// (contract/executor.hpp), for each bound layer what its forward and backward
// enqueue on the context's stream. They work on the same memory plan as the
// CPU executors (the same offsets, in a device arena), so a weights region
// is the same bytes on both devices. The input, views and combinators run
// through the device-independent executors (contract/executor.hpp,
// model/chain_executor.hpp); a layer with no executor here is the primary
// template's compile error, naming the layer and the device.
//
// Everything an executor does is enqueued on io.context->stream, so a whole
// step can be captured as one CUDA graph: nothing is allocated, nothing
// waits for the host. A kernel's own scratch is the step program's
// scratchpad (scratchpad_bytes(), bind()).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "typeflow/backend/cuda/attention_executor.hpp"  // causal_self_attention
#include "typeflow/backend/cuda/batch_norm.hpp"
#include "typeflow/backend/cuda/column_sums.hpp"
#include "typeflow/backend/cuda/conv2d_executor.hpp"  // conv2d, depthwise_conv2d
#include "typeflow/backend/cuda/context.hpp"
#include "typeflow/backend/cuda/elementwise.hpp"
#include "typeflow/backend/cuda/embedding_executors.hpp"  // embedding, positional_embedding, tied_logits
#include "typeflow/backend/cuda/layer_norm.hpp"
#include "typeflow/backend/cuda/lora.hpp"
#include "typeflow/backend/cuda/matmul.hpp"
#include "typeflow/backend/cuda/pooling_executors.hpp"  // the poolings
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/backend/cuda/softmax_cross_entropy.hpp"
#include "typeflow/layers/activations.hpp"
#include "typeflow/layers/batch_norm.hpp"
#include "typeflow/layers/dense.hpp"
#include "typeflow/layers/dropout.hpp"
#include "typeflow/layers/dropout_mask.hpp"
#include "typeflow/layers/layer_norm.hpp"
#include "typeflow/layers/lora.hpp"
#include "typeflow/layers/softmax.hpp"
#include "typeflow/contract/executor.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {

namespace backend::cuda {

// dense: one cuBLASLt product forward with the bias (and a following relu)
// as its epilogue; backward, the kernel gradient with the bias gradient as
// its epilogue, then the input gradient.
//
// In a 16-bit compute dtype (mixed_float16, mixed_bfloat16) the products take
// 16-bit A and B and accumulate in float32. The master kernel and bias are
// converted into scratch at each call (scratch does not outlive one); the
// input is read in place when stored in the compute dtype, else converted;
// the output is stored in 16 bits (Layer::stores_16bit) with a 16-bit bias,
// else in float32, rounded to the compute dtype as on the CPU. Backward
// converts the float32 d_out to the compute dtype (where float16 overflows
// show up as infinities for the loss scale), and writes dW, db and dX in
// float32 straight from the float32 accumulators: the CPU rounds those three
// to 16 bits as well; here that would cost a pass each and only add error,
// and the incoming gradient, which is rounded, is what limits the loss scale.
// A float32 dense reading a 16-bit input converts it to float32 in scratch.
//
// With lora<> (layers/lora.hpp) the kernel is frozen: no kernel gradient,
// the bias gradient from column sums of d_out, and the adapter
// (backend/cuda/lora.hpp) adds its term to the float32 product before the
// output is rounded or stored in 16 bits, reading x and d_out in float32 as
// the CPU's adapter does (rounded to the compute dtype under a 16-bit
// policy); its t and u live in the layer's workspace.
template <class Layer, int Batch>
class dense_executor {
  using params = typename Layer::params;
  using compute_value = typename Layer::compute_dtype::value_type;  // float, f16 or bf16
  using input_value = typename Layer::input_dtype::value_type;
  using output_value = typename Layer::output_dtype::value_type;
  static constexpr bool low_precision = Layer::low_precision;
  static constexpr bool stores_16bit = Layer::stores_16bit;
  static constexpr bool with_lora = Layer::with_lora;
  // The product writes its 16-bit output itself, unless an adapter adds to it first.
  static constexpr bool product_stores_16bit = stores_16bit && !with_lora;
  // The product reads its input in the compute dtype: converted when stored otherwise.
  static constexpr bool converts_input = !std::is_same_v<input_value, compute_value>;
  static constexpr gemm_precision product_precision = !low_precision ? gemm_precision::float32
                                                      : std::is_same_v<compute_value, typeflow::bf16>
                                                          ? gemm_precision::bfloat16
                                                          : gemm_precision::float16;
  static_assert(!low_precision || std::is_same_v<compute_value, typeflow::f16> ||
                std::is_same_v<compute_value, typeflow::bf16>);
  // Which layers store 16 bits is decided through dtype_flow_of; should nvcc
  // fail to match it for an activation, its device code would see float32
  // where the host stores 16 bits (kernels launched that were never built).
  static_assert(!low_precision || dtype_flow_of<relu> == dtype_flow::passes_through,
                "model<Net, mixed policy, Strategy, cuda>: nvcc does not match dtype_flow_of<activation<Functor, "
                "Epilogue, Name>> (layers/activations.hpp; it cannot deduce the fixed_string parameter): "
                "specialize it on the spec's functor instead, as the executors do");
  static constexpr int rows = Batch * static_cast<int>(Layer::rows_per_sample);
  static constexpr int units = Layer::units;
  static constexpr int in_features = Layer::in_features;
  static constexpr int kernel_stride = static_cast<int>(std::tuple_element_t<0, typename params::tuple>::row_stride);
  static constexpr epilogue fused = Layer::fused;
  static constexpr std::size_t input_count = static_cast<std::size_t>(rows) * in_features;
  static constexpr std::size_t output_count = static_cast<std::size_t>(rows) * units;

  // Scratch: [kernel in 16 bits, padded rows as stored] [input in the compute
  // dtype] [forward: the bias as the epilogue reads it | backward: d_out in 16 bits]
  // and with lora<>: [x in float32] [the float32 product | d_out rounded, float32].
  static constexpr std::size_t kernel_bytes =
      low_precision ? scratch_align(Layer::kernel_floats * sizeof(compute_value)) : 0;
  static constexpr std::size_t input_bytes =
      converts_input ? scratch_align(input_count * sizeof(compute_value)) : 0;
  static constexpr std::size_t bias_bytes =
      low_precision ? scratch_align(units * sizeof(output_value)) : 0;
  static constexpr std::size_t gradient_bytes =
      low_precision ? scratch_align(output_count * sizeof(compute_value)) : 0;
  static constexpr std::size_t input_offset = kernel_bytes;
  static constexpr std::size_t tail_offset = kernel_bytes + input_bytes;
  // The adapter's float32 x: converted or rounded when x is not already that.
  static constexpr bool adapter_copies_input = with_lora && (low_precision || !std::is_same_v<input_value, float>);
  static constexpr std::size_t adapter_input_offset =
      tail_offset + (bias_bytes > gradient_bytes ? bias_bytes : gradient_bytes);
  static constexpr std::size_t lora_float_offset =
      adapter_input_offset + (adapter_copies_input ? scratch_align(input_count * sizeof(float)) : 0);
  static constexpr std::size_t lora_float_bytes =
      with_lora && (stores_16bit || low_precision) ? scratch_align(output_count * sizeof(float)) : 0;

 public:
  explicit dense_executor(const layer_io<typeflow::cuda>& io)
      : io_(io),
        forward_(io.context->lt, {rows, units, in_features, false, false, 0, kernel_stride}, product_precision,
                 fused == epilogue::relu        ? gemm_epilogue::relu_bias
                 : fused == epilogue::gelu_tanh ? gemm_epilogue::gelu_aux_bias
                                                : gemm_epilogue::bias,
                 product_stores_16bit, false, io.context->gemm_workspace_bytes),
        // d_kernel (in, units) = x^T (in, rows) · d_out (rows, units), and d_bias its column sums
        kernel_grad_(with_lora ? matmul()
                               : matmul(io.context->lt, {in_features, units, rows, true, false, 0, 0, kernel_stride},
                                        product_precision, gemm_epilogue::bias_gradient, false, false,
                                        io.context->gemm_workspace_bytes)),
        // d_in (rows, in) = d_out (rows, units) · kernel^T (units, in)
        input_grad_(io.context->lt, {rows, in_features, units, false, true, 0, kernel_stride}, product_precision,
                    gemm_epilogue::none, false, false, io.context->gemm_workspace_bytes) {
    if constexpr (with_lora)
      adapter_ = lora_adapter(*io.context, {rows, in_features, units, Layer::lora_rank, Layer::lora_type::scale,
                                            row_stride<2>, row_stride<3>, 0, 0});
  }

  std::size_t scratchpad_bytes() const { return lora_float_offset + lora_float_bytes; }
  void bind(std::byte* scratchpad) { scratch_ = scratchpad; }

  void forward() {
    const cudaStream_t s = io_.context->stream;
    float* out = product_out();
    if constexpr (!low_precision) {
      forward_.run(input(s), kernel(), out, bias(), gelu_input(), io_.context->gemm_workspace, s);
    } else {
      using bias_value = std::conditional_t<product_stores_16bit, output_value, float>;
      auto* b = reinterpret_cast<bias_value*>(scratch_ + tail_offset);
      if constexpr (product_stores_16bit)
        map(bias(), b, units, identity_fn{}, s);
      else  // a float32 bias holding the compute dtype's values (the CPU rounds it too)
        map(bias(), b, units, round_fn<compute_value>{}, s);
      forward_.run(input(s), kernel_16bit(s), out, b, gelu_input(), io_.context->gemm_workspace, s);
    }
    if constexpr (with_lora) {
      adapter_.forward(adapter_input(s), param<2>(), param<3>(), out, lora_kept(), io_.context->gemm_workspace, s);
      if constexpr (stores_16bit) {
        to_16bit(out, reinterpret_cast<output_value*>(io_.out), output_count, s);
        return;
      }
    }
    // cuBLASLt has relu and gelu epilogues, not tanh or sigmoid: those run
    // in place right after (the activation layer's forward is a no-op). On a
    // 16-bit output that rounds twice (the product, then f of it) where the
    // CPU rounds f of the float32 product once.
    auto* stored = reinterpret_cast<output_value*>(io_.out);
    if constexpr (fused == epilogue::tanh || fused == epilogue::sigmoid) {
      using functor = std::conditional_t<fused == epilogue::tanh, functors::tanh_fn, functors::sigmoid>;
      if constexpr (low_precision && !stores_16bit)
        map(stored, stored, output_count, activation_rounded_fn<functor, compute_value>{}, s);
      else
        activation_forward<functor>(stored, stored, output_count, s);
    } else if constexpr (low_precision && !stores_16bit && fused != epilogue::gelu_tanh) {
      // (A fused gelu_tanh stored in float32 keeps its float32 product: the
      // CPU's gelu of the rounded product, stored in float32, is as close.)
      map(stored, stored, output_count, round_fn<compute_value>{}, s);
    }
  }

  void backward() {
    const cudaStream_t s = io_.context->stream;
    float* d_bias = io_.grads + params::template offset<1>;
    const void* d_out = io_.d_out;
    if constexpr (low_precision) {
      auto* converted = reinterpret_cast<compute_value*>(scratch_ + tail_offset);
      if constexpr (fused == epilogue::gelu_tanh)  // gelu_tanh's backward, then rounded, in one pass
        map2(gelu_input(), io_.d_out, converted, output_count, activation_gradient_fn<functors::gelu_tanh>{}, s);
      else
        to_16bit(io_.d_out, converted, output_count, s);
      d_out = converted;
    } else if constexpr (fused == epilogue::gelu_tanh) {
      // In place, as the activation's backward would have: the buffer is its d_in.
      auto* d_product = const_cast<float*>(io_.d_out);
      map2(gelu_input(), io_.d_out, d_product, output_count, activation_gradient_fn<functors::gelu_tanh>{}, s);
    }
    if constexpr (!with_lora) {
      kernel_grad_.run(input(s), d_out, io_.grads + params::template offset<0>, nullptr, d_bias,
                       io_.context->gemm_workspace, s);
      // The kernel only for d_in (dW does not read it).
      if (io_.d_in) input_grad_.run(d_out, product_kernel(s), io_.d_in, nullptr, nullptr, io_.context->gemm_workspace, s);
    } else {
      const float* d_out_float = adapter_d_out(s);
      column_sums(d_out_float, d_bias, static_cast<std::size_t>(rows), units, s);
      if (io_.d_in) input_grad_.run(d_out, product_kernel(s), io_.d_in, nullptr, nullptr, io_.context->gemm_workspace, s);
      // After d_in is written: the adapter adds to it.
      adapter_.backward(adapter_input(s), param<2>(), param<3>(), lora_kept(), lora_backward(), d_out_float,
                        io_.grads + params::template offset<2>, io_.grads + params::template offset<3>, io_.d_in,
                        io_.context->gemm_workspace, s);
    }
  }

 private:
  template <std::size_t P>
  static constexpr int row_stride = static_cast<int>(std::tuple_element_t<P, typename params::tuple>::row_stride);
  template <std::size_t I>
  float* param() const {
    return param_data<params, I>(io_);
  }
  // The kernel (frozen with lora<>) and the bias.
  const float* kernel() const { return param_data<params, 0>(io_); }
  const float* bias() const { return param_data<params, 1>(io_); }
  const void* product_kernel(cudaStream_t s) const {
    if constexpr (low_precision) return kernel_16bit(s);
    else return kernel();
  }

  // The input as the product reads it (converted into scratch when needed).
  const void* input(cudaStream_t s) const {
    if constexpr (!converts_input) {
      return io_.in;
    } else {
      auto* converted = reinterpret_cast<compute_value*>(scratch_ + input_offset);
      map(reinterpret_cast<const input_value*>(io_.in), converted, input_count, identity_fn{}, s);
      return converted;
    }
  }
  // The master kernel in 16 bits, with its padded rows (the product's ldb is kernel_stride).
  const compute_value* kernel_16bit(cudaStream_t s) const {
    auto* k = reinterpret_cast<compute_value*>(scratch_);
    to_16bit(kernel(), k, Layer::kernel_floats, s);
    return k;
  }

  // Where the product writes: the output, or with lora<> under a 16-bit
  // store a float32 buffer that the adapter adds to first.
  float* product_out() const {
    if constexpr (with_lora && stores_16bit) return reinterpret_cast<float*>(scratch_ + lora_float_offset);
    else return io_.out;
  }
  // The adapter's x in float32 (rounded to the compute dtype under a 16-bit policy).
  const float* adapter_input(cudaStream_t s) const {
    if constexpr (!adapter_copies_input) {
      return io_.in;
    } else {
      auto* x = reinterpret_cast<float*>(scratch_ + adapter_input_offset);
      const auto* from = reinterpret_cast<const input_value*>(io_.in);
      if constexpr (std::is_same_v<input_value, float>)
        map(from, x, input_count, round_fn<compute_value>{}, s);
      else
        map(from, x, input_count, identity_fn{}, s);  // 16-bit values are exact in float
      return x;
    }
  }
  // d_out as the adapter and the bias gradient read it: rounded under a 16-bit policy.
  const float* adapter_d_out(cudaStream_t s) const {
    if constexpr (!low_precision) {
      return io_.d_out;
    } else {
      auto* d = reinterpret_cast<float*>(scratch_ + lora_float_offset);
      map(io_.d_out, d, output_count, round_fn<compute_value>{}, s);
      return d;
    }
  }
  // A fused gelu_tanh's input, the product as stored (cuBLASLt's aux): in the
  // workspace, from forward to backward. nullptr when gelu_tanh is not fused.
  auto* gelu_input() const {
    using stored_product = std::conditional_t<product_stores_16bit, output_value, float>;
    if constexpr (fused == epilogue::gelu_tanh) return reinterpret_cast<stored_product*>(io_.workspace);
    else return static_cast<stored_product*>(nullptr);
  }
  float* lora_kept() const { return reinterpret_cast<float*>(io_.workspace); }
  float* lora_backward() const {
    return reinterpret_cast<float*>(io_.workspace + lora_buffer_bytes(static_cast<std::size_t>(rows), Layer::lora_rank));
  }

  layer_io<typeflow::cuda> io_;
  std::byte* scratch_ = nullptr;  // the step program's scratchpad
  matmul forward_, kernel_grad_, input_grad_;
  lora_adapter adapter_;  // with lora<> only
};

// Activations: the shared functors, forward (unless a dense took it over) and
// backward in place on the gradient. Values are read and written in their
// stored type (16 bits under a mixed policy), computed in float; gradients
// are float32.
// (Matched by the spec's functor: nvcc 13 does not deduce activation's
// fixed_string parameter in a partial specialization.)
template <class Functor, class Layer, int Batch>
class activation_executor : public executor_defaults {
  using value = typename Layer::output_dtype::value_type;  // float, f16 or bf16
  static constexpr std::size_t count = static_cast<std::size_t>(Batch) * Layer::input_shape::size;

 public:
  explicit activation_executor(const layer_io<typeflow::cuda>& io) : io_(io) {}

  void forward() {
    const cudaStream_t s = io_.context->stream;
    if constexpr (!Layer::fused) activation_forward<Functor>(in(), out(), count, s);
  }
  void backward() {
    const cudaStream_t s = io_.context->stream;
    if (!io_.d_in) return;
    // A fused gelu_tanh's derivative needs the product, which the dense kept and applies.
    if constexpr (Layer::fused && !Functor::derivative_from_output) return;
    const value* from = Functor::derivative_from_output ? out() : in();
    activation_backward<Functor>(from, io_.d_out, io_.d_in, count, s);
  }

 private:
  const value* in() const { return reinterpret_cast<const value*>(io_.in); }
  value* out() const { return reinterpret_cast<value*>(io_.out); }

  layer_io<typeflow::cuda> io_;
};

// dropout: the CPU layer's mask, bit for bit, drawn again in backward from
// the counter-based generator instead of being stored. Values in their
// stored type, gradients float32.
template <float Rate, class Layer, int Batch>
class dropout_executor : public executor_defaults {
  using value = typename Layer::output_dtype::value_type;  // float, f16 or bf16
  static constexpr std::size_t count = static_cast<std::size_t>(Batch) * Layer::input_shape::size;

 public:
  explicit dropout_executor(const layer_io<typeflow::cuda>& io) : io_(io), seed_(dropout_seed(io.run->seed, io.salt)) {}

  void forward() {
    const cudaStream_t s = io_.context->stream;
    const bool training = io_.run->training;
    const auto* in = reinterpret_cast<const value*>(io_.in);
    auto* out = reinterpret_cast<value*>(io_.out);
    training_ = training && Rate > 0.f;
    if (!training_) {
      if (out != in)
        TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(out, in, count * sizeof(value), cudaMemcpyDeviceToDevice, s));
      return;
    }
    dropout_forward(in, out, count, Rate, seed_, &io_.context->step->step, s);
  }
  void backward() {
    const cudaStream_t s = io_.context->stream;
    if (!io_.d_in) return;
    if (!training_) {
      if (io_.d_in != io_.d_out)
        TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(io_.d_in, io_.d_out, count * sizeof(float), cudaMemcpyDeviceToDevice, s));
      return;
    }
    dropout_backward(io_.d_out, io_.d_in, count, Rate, seed_, &io_.context->step->step, s);
  }

 private:
  layer_io<typeflow::cuda> io_;
  std::uint64_t seed_;  // the mask's key, fixed per replica; the step comes from device memory
  bool training_ = false;
};

// layer_norm: fused forward and backward kernels; each row's mean and
// 1 / std kept in the workspace.
template <layer_norm_options Options, class Layer, int Batch>
class layer_norm_executor {
  static_assert(Options.center && Options.scale,
                "model<Net, Policy, Strategy, cuda>: layer_norm on tf::cuda needs center and scale (the defaults)");
  static constexpr int rows = Batch * static_cast<int>(Layer::rows_per_sample);
  static constexpr int features = Layer::features;
  using params = typename Layer::params;

 public:
  explicit layer_norm_executor(const layer_io<typeflow::cuda>& io) : io_(io) {}
  std::size_t scratchpad_bytes() const { return layer_norm_backward_workspace_bytes(rows, features); }
  void bind(std::byte* scratchpad) { scratch_ = scratchpad; }

  void forward() {
    const cudaStream_t s = io_.context->stream;
    layer_norm_forward(io_.in, gamma(), beta(), io_.out, mean(), inverse_std(), rows, features, Options.epsilon, s);
  }
  void backward() {
    const cudaStream_t s = io_.context->stream;
    layer_norm_backward(io_.in, gamma(), mean(), inverse_std(), io_.d_out, io_.d_in, io_.grads + params::template offset<0>,
                        io_.grads + params::template offset<1>, rows, features, s,
                        reinterpret_cast<float*>(scratch_));
  }

 private:
  const float* gamma() const { return io_.params + params::template offset<0>; }
  const float* beta() const { return io_.params + params::template offset<1>; }
  float* mean() const { return reinterpret_cast<float*>(io_.workspace); }
  float* inverse_std() const { return reinterpret_cast<float*>(io_.workspace) + rows; }

  layer_io<typeflow::cuda> io_;
  std::byte* scratch_ = nullptr;  // the step program's scratchpad
};

// batch_normalization: the batch's statistics in training (the moving ones
// updated on the device), the moving ones in inference; the batch's mean
// and 1 / std kept in the workspace for backward.
template <batch_norm_options Options, class Layer, int Batch>
class batch_norm_executor {
  using params = typename Layer::params;
  static constexpr int rows = Batch * static_cast<int>(Layer::rows_per_sample);
  static constexpr int n = Layer::features;

 public:
  explicit batch_norm_executor(const layer_io<typeflow::cuda>& io) : io_(io) {}
  std::size_t scratchpad_bytes() const { return batch_norm_scratch_bytes(rows, n); }
  void bind(std::byte* scratchpad) { scratch_ = scratchpad; }

  void forward() {
    const cudaStream_t s = io_.context->stream;
    if (!io_.run || io_.run->training)
      batch_norm_forward_training(io_.in, io_.out, gamma(), beta(), param<Layer::moving_mean_index>(),
                                  param<Layer::moving_variance_index>(), mean(), inverse_std(), rows, n,
                                  Options.momentum, Options.epsilon, scratch_, s, valid_samples(),
                                  static_cast<int>(Layer::rows_per_sample));
    else
      batch_norm_forward_inference(io_.in, io_.out, gamma(), beta(), param<Layer::moving_mean_index>(),
                                   param<Layer::moving_variance_index>(), rows, n, Options.epsilon, s);
  }
  void backward() {  // d_in may be d_out's buffer (gradient_in_place)
    float* d_gamma = nullptr;
    float* d_beta = nullptr;
    if constexpr (Layer::has_gamma) d_gamma = io_.grads + params::template offset<Layer::gamma_index>;
    if constexpr (Layer::has_beta) d_beta = io_.grads + params::template offset<Layer::beta_index>;
    batch_norm_backward(io_.in, io_.d_out, io_.d_in, gamma(), mean(), inverse_std(), d_gamma, d_beta, rows, n,
                        scratch_, io_.context->stream, valid_samples(), static_cast<int>(Layer::rows_per_sample));
  }

 private:
  // A last partial batch's samples on this replica, in the device's step
  // values (cuda_engine.hpp sets them each step); null outside a step program.
  const std::int32_t* valid_samples() const {
    return io_.context->step ? valid_samples_on_device(io_.context->step) : nullptr;
  }
  template <std::size_t I>
  float* param() const {
    return io_.params + params::template offset<I>;
  }
  const float* gamma() const {
    if constexpr (Layer::has_gamma) return param<Layer::gamma_index>();
    else return nullptr;
  }
  const float* beta() const {
    if constexpr (Layer::has_beta) return param<Layer::beta_index>();
    else return nullptr;
  }
  float* mean() const { return reinterpret_cast<float*>(io_.workspace); }
  float* inverse_std() const { return reinterpret_cast<float*>(io_.workspace) + n; }

  layer_io<typeflow::cuda> io_;
  std::byte* scratch_ = nullptr;  // the step program's scratchpad
};

// softmax over the last axis: forward the fused row kernel the loss uses;
// backward in place on the gradient, from the output (a warp per row).
template <class Layer, int Batch>
class softmax_executor : public executor_defaults {
  static constexpr int rows = Batch * static_cast<int>(Layer::rows_per_sample);

 public:
  explicit softmax_executor(const layer_io<typeflow::cuda>& io) : io_(io) {}

  void forward() { softmax_forward(io_.in, io_.out, rows, Layer::classes, io_.context->stream); }
  void backward() {
    if (io_.d_in) softmax_backward(io_.out, io_.d_in, rows, Layer::classes, io_.context->stream);  // d_in is d_out
  }

 private:
  layer_io<typeflow::cuda> io_;
};

}  // namespace backend::cuda

// Which specs run on tf::cuda, and through which executor above.
template <int Units, class... Options, class Layer, int Batch>
class executor<dense<Units, Options...>, Layer, Batch, cuda> : public backend::cuda::dense_executor<Layer, Batch> {
 public:
  using backend::cuda::dense_executor<Layer, Batch>::dense_executor;
};
// (Matched by the spec's functor: nvcc 13 does not deduce activation's
// fixed_string parameter in a partial specialization.)
template <class Spec, class Layer, int Batch>
  requires requires { typename Spec::functor; }
class executor<Spec, Layer, Batch, cuda>
    : public backend::cuda::activation_executor<typename Spec::functor, Layer, Batch> {
 public:
  using backend::cuda::activation_executor<typename Spec::functor, Layer, Batch>::activation_executor;
};
template <float Rate, class Layer, int Batch>
class executor<dropout<Rate>, Layer, Batch, cuda> : public backend::cuda::dropout_executor<Rate, Layer, Batch> {
 public:
  using backend::cuda::dropout_executor<Rate, Layer, Batch>::dropout_executor;
};
template <layer_norm_options Options, class... Initializers, class Layer, int Batch>
class executor<layer_normalization<Options, Initializers...>, Layer, Batch, cuda>
    : public backend::cuda::layer_norm_executor<Options, Layer, Batch> {
 public:
  using backend::cuda::layer_norm_executor<Options, Layer, Batch>::layer_norm_executor;
};

template <batch_norm_options Options, class... Initializers, class Layer, int Batch>
class executor<batch_normalization<Options, Initializers...>, Layer, Batch, cuda>
    : public backend::cuda::batch_norm_executor<Options, Layer, Batch> {
 public:
  using backend::cuda::batch_norm_executor<Options, Layer, Batch>::batch_norm_executor;
};
template <class Layer, int Batch>
class executor<softmax, Layer, Batch, cuda> : public backend::cuda::softmax_executor<Layer, Batch> {
 public:
  using backend::cuda::softmax_executor<Layer, Batch>::softmax_executor;
};

}  // namespace typeflow

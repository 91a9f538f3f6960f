// conv2d and depthwise_conv2d on tf::cuda: their executors (the kernels:
// backend/cuda/convolution.hpp). backend/cuda/layers.hpp includes this.
//
// conv2d is a cuBLASLt product over the patch matrix (core/conv_windows.hpp):
//   y (rows, F) = patches (rows, kh kw C) · kernel (kh kw C, F) [+ bias]
// with the kernel as Keras stores it (rows padded: ldb is the row stride),
// so a weights file moves between the devices unchanged; backward's d_kernel
// = patchesᵀ · d_y (the bias gradient in its epilogue) and d_patches = d_y ·
// kernelᵀ, which conv_patch_gradient gathers back into d_x. The patches are
// built again in backward (scratch does not outlive a call), into the same
// scratch that d_patches then takes. depthwise_conv2d runs a thread per
// element. A relu, tanh or sigmoid that follows runs here, as on the CPU.
//
// Under a 16-bit compute dtype conv2d's product reads 16-bit patches and
// kernel and accumulates in float32 (as dense's); depthwise_conv2d computes
// in float32 on operands rounded to the compute dtype. Outputs are rounded
// to it, as the CPU's; gradients are written in float32.
//
// (A measurement on the H200 decides whether cuDNN's convolutions replace
// the patch product: none has been made.)
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <tuple>
#include <type_traits>

#include "typeflow/backend/cuda/context.hpp"
#include "typeflow/backend/cuda/convolution.hpp"
#include "typeflow/backend/cuda/elementwise.hpp"
#include "typeflow/backend/cuda/matmul.hpp"
#include "typeflow/core/conv_windows.hpp"
#include "typeflow/layers/conv2d.hpp"
#include "typeflow/contract/executor.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {
namespace backend::cuda {

// The layer's windows, from its compile-time geometry.
template <class Layer>
constexpr conv_windows::conv_window conv_window_of() {
  using g = typename Layer::geometry;
  return {g::rows.in,       g::cols.in,       g::channels,         g::rows.kernel,      g::cols.kernel,
          g::rows.stride,   g::cols.stride,   g::rows.dilation,    g::cols.dilation,    g::rows.pad_before(),
          g::cols.pad_before(), g::rows.out(), g::cols.out()};
}

// What both convolutions share: the fused activation after the output.
template <class Layer, class ComputeValue>
void finish_output(float* out, std::size_t count, bool relu_done, cudaStream_t s) {
  constexpr bool low_precision = Layer::low_precision;
  auto apply = [&]<class Functor>(Functor) {
    if constexpr (low_precision)
      map(out, out, count, activation_rounded_fn<Functor, ComputeValue>{}, s);
    else
      activation_forward<Functor>(out, out, count, s);
  };
  if constexpr (Layer::fused == epilogue::relu) {
    if (!relu_done) apply(functors::relu{});
    else if constexpr (low_precision) map(out, out, count, round_fn<ComputeValue>{}, s);
  } else if constexpr (Layer::fused == epilogue::tanh) {
    apply(functors::tanh_fn{});
  } else if constexpr (Layer::fused == epilogue::sigmoid) {
    apply(functors::sigmoid{});
  } else if constexpr (low_precision) {
    map(out, out, count, round_fn<ComputeValue>{}, s);
  }
}

template <class Layer, int Batch>
class conv2d_executor {
  using params = typename Layer::params;
  using compute_value = typename Layer::compute_dtype::value_type;  // float, f16 or bf16
  static constexpr bool low_precision = Layer::low_precision;
  static constexpr bool with_bias = Layer::with_bias;
  static constexpr gemm_precision product_precision = !low_precision ? gemm_precision::float32
                                                      : std::is_same_v<compute_value, typeflow::bf16>
                                                          ? gemm_precision::bfloat16
                                                          : gemm_precision::float16;
  static constexpr conv_windows::conv_window window = conv_window_of<Layer>();
  static constexpr int rows = Batch * window.out_h * window.out_w;
  static constexpr int patch = window.patch_size();
  static constexpr int filters = Layer::out_channels;
  static constexpr int kernel_stride = static_cast<int>(std::tuple_element_t<0, typename params::tuple>::row_stride);
  static constexpr std::size_t kernel_floats = std::tuple_element_t<0, typename params::tuple>::stored_floats;
  static constexpr std::size_t output_count = static_cast<std::size_t>(rows) * filters;
  static constexpr bool relu_in_epilogue = with_bias && Layer::fused == epilogue::relu;

  // Scratch: [patches, then d_patches (float32)] [16 bits: kernel | bias rounded | d_out].
  static constexpr std::size_t patches_bytes = scratch_align(static_cast<std::size_t>(rows) * patch * sizeof(float));
  static constexpr std::size_t kernel16_at = patches_bytes;
  static constexpr std::size_t bias_at = kernel16_at + scratch_align(kernel_floats * sizeof(compute_value));
  static constexpr std::size_t d_out16_at = bias_at + scratch_align(filters * sizeof(float));
  static constexpr std::size_t scratch_used =
      low_precision ? d_out16_at + scratch_align(output_count * sizeof(compute_value)) : patches_bytes;

 public:
  explicit conv2d_executor(const layer_io<typeflow::cuda>& io)
      : io_(io),
        forward_(io.context->lt, {rows, filters, patch, false, false, 0, kernel_stride}, product_precision,
                 with_bias ? (relu_in_epilogue ? gemm_epilogue::relu_bias : gemm_epilogue::bias) : gemm_epilogue::none,
                 false, false, io.context->gemm_workspace_bytes),
        // d_kernel (patch, F) = patchesᵀ · d_out, d_bias its column sums
        kernel_grad_(io.context->lt, {patch, filters, rows, true, false, 0, 0, kernel_stride}, product_precision,
                     with_bias ? gemm_epilogue::bias_gradient : gemm_epilogue::none, false, false,
                     io.context->gemm_workspace_bytes),
        // d_patches (rows, patch) = d_out · kernelᵀ
        input_grad_(io.context->lt, {rows, patch, filters, false, true, 0, kernel_stride}, product_precision,
                    gemm_epilogue::none, false, false, io.context->gemm_workspace_bytes) {}

  std::size_t scratchpad_bytes() const { return scratch_used; }
  void bind(std::byte* scratchpad) { scratch_ = scratchpad; }

  void forward() {
    const cudaStream_t s = io_.context->stream;
    const void* bias = nullptr;
    if constexpr (with_bias) {
      if constexpr (low_precision) {
        map(param<1>(), scratch_float(bias_at), filters, round_fn<compute_value>{}, s);
        bias = scratch_float(bias_at);
      } else {
        bias = param<1>();
      }
    }
    forward_.run(patches(s), kernel(s), io_.out, bias, nullptr, io_.context->gemm_workspace, s);
    finish_output<Layer, compute_value>(io_.out, output_count, relu_in_epilogue, s);
  }

  void backward() {
    const cudaStream_t s = io_.context->stream;
    const void* d_out = io_.d_out;
    if constexpr (low_precision) {
      auto* converted = reinterpret_cast<compute_value*>(scratch_ + d_out16_at);
      to_16bit(io_.d_out, converted, output_count, s);
      d_out = converted;
    }
    float* d_bias = nullptr;
    if constexpr (with_bias) d_bias = io_.grads + params::template offset<1>;
    kernel_grad_.run(patches(s), d_out, io_.grads + params::template offset<0>, nullptr, d_bias,
                     io_.context->gemm_workspace, s);
    if (!io_.d_in) return;
    float* d_patches = scratch_float(0);  // over the patches, which the product above has read
    input_grad_.run(d_out, kernel(s), d_patches, nullptr, nullptr, io_.context->gemm_workspace, s);
    conv_patch_gradient(d_patches, io_.d_in, window, Batch, s);
  }

 private:
  template <std::size_t I>
  float* param() const {
    return io_.params + params::template offset<I>;
  }
  float* scratch_float(std::size_t at) const { return reinterpret_cast<float*>(scratch_ + at); }
  // The patch matrix in the compute dtype, at the start of scratch.
  const void* patches(cudaStream_t s) const {
    auto* p = reinterpret_cast<compute_value*>(scratch_);
    conv_patches(io_.in, p, window, Batch, s);
    return p;
  }
  // The kernel as the product reads it (16 bits: converted into scratch).
  const void* kernel(cudaStream_t s) const {
    if constexpr (!low_precision) {
      return param<0>();
    } else {
      auto* k = reinterpret_cast<compute_value*>(scratch_ + kernel16_at);
      to_16bit(param<0>(), k, kernel_floats, s);
      return k;
    }
  }

  layer_io<typeflow::cuda> io_;
  std::byte* scratch_ = nullptr;  // the step program's scratchpad
  matmul forward_, kernel_grad_, input_grad_;
};

template <class Layer, int Batch>
class depthwise_executor {
  using params = typename Layer::params;
  using compute_value = typename Layer::compute_dtype::value_type;
  static constexpr bool low_precision = Layer::low_precision;
  static constexpr bool with_bias = Layer::with_bias;
  static constexpr conv_windows::conv_window window = conv_window_of<Layer>();
  static constexpr int multiplier = Layer::out_channels / window.channels;
  static constexpr int kernel_stride = static_cast<int>(std::tuple_element_t<0, typename params::tuple>::row_stride);
  static constexpr std::size_t kernel_floats = std::tuple_element_t<0, typename params::tuple>::stored_floats;
  static constexpr std::size_t input_count = static_cast<std::size_t>(Batch) * window.in_size();
  static constexpr std::size_t output_count =
      static_cast<std::size_t>(Batch) * window.out_positions() * Layer::out_channels;

  // Scratch under a 16-bit policy: x | kernel | bias | d_out, rounded, in float32.
  static constexpr std::size_t kernel_at = scratch_align(input_count * sizeof(float));
  static constexpr std::size_t bias_at = kernel_at + scratch_align(kernel_floats * sizeof(float));
  static constexpr std::size_t d_out_at = bias_at + scratch_align(Layer::out_channels * sizeof(float));
  static constexpr std::size_t scratch_used =
      low_precision ? d_out_at + scratch_align(output_count * sizeof(float)) : 0;

 public:
  explicit depthwise_executor(const layer_io<typeflow::cuda>& io) : io_(io) {}
  std::size_t scratchpad_bytes() const { return scratch_used; }
  void bind(std::byte* scratchpad) { scratch_ = scratchpad; }

  void forward() {
    const cudaStream_t s = io_.context->stream;
    const float* bias = nullptr;
    if constexpr (with_bias) bias = rounded(param<1>(), bias_at, Layer::out_channels, s);
    depthwise_forward(rounded(io_.in, 0, input_count, s), rounded(param<0>(), kernel_at, kernel_floats, s),
                      kernel_stride, multiplier, bias, io_.out, window, Batch, s);
    finish_output<Layer, compute_value>(io_.out, output_count, false, s);
  }

  void backward() {
    const cudaStream_t s = io_.context->stream;
    float* d_bias = nullptr;
    if constexpr (with_bias) d_bias = io_.grads + params::template offset<1>;
    depthwise_backward(rounded(io_.in, 0, input_count, s), rounded(io_.d_out, d_out_at, output_count, s),
                       rounded(param<0>(), kernel_at, kernel_floats, s), kernel_stride, multiplier, io_.d_in,
                       io_.grads + params::template offset<0>, d_bias, window, Batch, s);
  }

 private:
  template <std::size_t I>
  float* param() const {
    return io_.params + params::template offset<I>;
  }
  // from itself, or under a 16-bit policy rounded to the compute dtype into scratch at `at`.
  const float* rounded(const float* from, std::size_t at, std::size_t n, cudaStream_t s) const {
    if constexpr (!low_precision) {
      return from;
    } else {
      auto* to = reinterpret_cast<float*>(scratch_ + at);
      map(from, to, n, round_fn<compute_value>{}, s);
      return to;
    }
  }

  layer_io<typeflow::cuda> io_;
  std::byte* scratch_ = nullptr;  // the step program's scratchpad
};

}  // namespace backend::cuda

template <int Filters, window Kernel, window Strides, padding Padding, class... Options, class Layer, int Batch>
class executor<conv2d<Filters, Kernel, Strides, Padding, Options...>, Layer, Batch, cuda>
    : public backend::cuda::conv2d_executor<Layer, Batch> {
 public:
  using backend::cuda::conv2d_executor<Layer, Batch>::conv2d_executor;
};
template <window Kernel, window Strides, padding Padding, class... Options, class Layer, int Batch>
class executor<depthwise_conv2d<Kernel, Strides, Padding, Options...>, Layer, Batch, cuda>
    : public backend::cuda::depthwise_executor<Layer, Batch> {
 public:
  using backend::cuda::depthwise_executor<Layer, Batch>::depthwise_executor;
};

}  // namespace typeflow

// dense on the CPU: oneDNN matmuls, the bias (and a following relu, tanh or
// sigmoid) fused as post-ops.
//
// In a 16-bit compute dtype the product sees the input, kernel, bias,
// output and every gradient rounded to 16 bits, with float32 accumulation.
// Two ways to that (backend/cpu/products_16bit.hpp decides at set-up):
//  - native (bfloat16 on AVX512-BF16 or AMX): oneDNN bf16 matmuls. Forward
//    converts the kernel to bf16 in the layer's workspace, where backward
//    reads it again; a bf16-stored input is read as it is (a float32 one is
//    converted, into the workspace too), and a bf16-stored output is written
//    by the matmul itself, after the bias and the epilogue in float32;
//  - emulated (AVX2, float16): the rounded values are held in float32 and the
//    product runs in float32 (precision/storage.hpp).
// Either way the output is stored in 16 bits when the layers after it read 16 bits.
//
// With lora<> the kernel is frozen: no kernel gradient is computed, and the
// adapter (backend/cpu/lora.hpp) adds its term after the product, in float32.
#pragma once

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "typeflow/backend/cpu/context.hpp"
#include "typeflow/backend/cpu/lora.hpp"
#include "typeflow/backend/cpu/matmul.hpp"
#include "typeflow/core/parallel.hpp"
#include "typeflow/layers/dense.hpp"
#include "typeflow/contract/executor.hpp"
#include "typeflow/precision/storage.hpp"

namespace typeflow {

template <int Units, class... Options, class Layer, int Batch>
class executor<dense<Units, Options...>, Layer, Batch, cpu> {
  using params = typename Layer::params;
  using compute_dtype = typename Layer::compute_dtype;
  using input_dtype = typename Layer::input_dtype;
  static constexpr bool low_precision = Layer::low_precision;
  static constexpr bool stores_16bit = Layer::stores_16bit;
  static constexpr bool copies_input = Layer::copies_input;
  static constexpr int units = Layer::units;
  static constexpr int in_features = Layer::in_features;
  static constexpr std::size_t kernel_floats = Layer::kernel_floats;
  static constexpr std::size_t bias_floats = Layer::bias_floats;
  static constexpr int rows = Batch * static_cast<int>(Layer::rows_per_sample);
  // The kernel's rows are stored padded (see padded_row_length).
  static constexpr int kernel_stride = static_cast<int>(std::tuple_element_t<0, typename params::tuple>::row_stride);
  static constexpr bool with_lora = Layer::with_lora;

 public:
  explicit executor(const layer_io<cpu>& io) : io_(io), native_(native_possible && io.context->native_bf16) {
    const backend::cpu::gemm_storage bf16_in{native_, false};
    forward_ = backend::cpu::matmul(*io.context, {rows, units, in_features, false, false, 0, kernel_stride}, true,
                                    Layer::fused, false, 1.f, {native_, native_ && stores_16bit});
    // d_in (rows, in) = d_out (rows, units) · kernel^T (units, in)
    input_grad_ = backend::cpu::matmul(*io.context, {rows, in_features, units, false, true, 0, kernel_stride}, false,
                                       epilogue::none, false, 1.f, bf16_in);
    // d_kernel (in, units) = x^T (in, rows) · d_out (rows, units), unless the kernel is frozen
    if constexpr (!with_lora)
      kernel_grad_ = backend::cpu::matmul(*io.context, {in_features, units, rows, true, false, 0, 0, kernel_stride},
                                          false, epilogue::none, false, 1.f, bf16_in);
    else
      adapter_ = backend::cpu::lora_adapter(
          *io.context,
          {rows, in_features, units, Layer::lora_rank, Layer::lora_type::scale, row_stride<2>, row_stride<3>, 0, 0},
          true, io.d_in != nullptr);
    if constexpr (native_possible)
      if (native_)
        kernel_copy_ = io.context->weight_copies.add(param_data<params, 0>(io), kernel_bf16(), kernel_floats,
                                                     io.workspace_persists);
  }

  std::size_t scratchpad_bytes() const {
    return std::max({forward_.scratchpad_bytes(), kernel_grad_.scratchpad_bytes(), input_grad_.scratchpad_bytes(),
                     adapter_.scratchpad_bytes()});
  }

  void bind(std::byte* scratchpad) {
    if constexpr (native_possible)
      if (native_) return bind_native(scratchpad);
    const float* kernel = param_data<params, 0>(io_);
    const float* bias = param_data<params, 1>(io_);
    const float* in = io_.in;
    float* out = io_.out;
    if constexpr (low_precision) {
      kernel = rounded_kernel();
      bias = rounded_kernel() + kernel_floats;
    }
    if constexpr (copies_input) in = rounded_input();
    if constexpr (stores_16bit) out = output_before_storing();
    forward_.bind(in, kernel, bias, out, scratchpad);
    if constexpr (with_lora) {
      float* kept = reinterpret_cast<float*>(io_.workspace);
      float* backward_buffer =
          reinterpret_cast<float*>(io_.workspace + lora_buffer_bytes(static_cast<std::size_t>(rows), Layer::lora_rank));
      adapter_.bind(in, param_data<params, 2>(io_), param_data<params, 3>(io_), out, kept, backward_buffer, io_.d_out,
                    param_gradient<params, 2>(io_), param_gradient<params, 3>(io_), io_.d_in, scratchpad);
    } else {
      kernel_grad_.bind(in, io_.d_out, nullptr, param_gradient<params, 0>(io_), scratchpad);
    }
    if (io_.d_in) input_grad_.bind(io_.d_out, kernel, nullptr, io_.d_in, scratchpad);
  }

  void forward() {
    if constexpr (native_possible)
      if (native_) return forward_native();
    if constexpr (low_precision) round_weights();
    if constexpr (copies_input) round_input();
    forward_.run();
    if constexpr (with_lora) adapter_.forward();
    if constexpr (stores_16bit)
      precision::from_float<compute_dtype>(output_before_storing(),
                                           reinterpret_cast<typename compute_dtype::value_type*>(io_.out),
                                           output_count);
    else if constexpr (low_precision)
      precision::round_in_place<compute_dtype>(io_.out, output_count);
  }

  void backward() {
    // The gradient arriving here is held in 16 bits (it is this layer's
    // to use up), and the input is copied again: scratch does not
    // outlive a call.
    if constexpr (native_possible)
      if (native_) return backward_native();
    if constexpr (low_precision) {
      precision::round_in_place<compute_dtype>(const_cast<float*>(io_.d_out), output_count);
      round_weights();
    }
    if constexpr (copies_input) round_input();
    if constexpr (!with_lora) kernel_grad_.run();
    bias_gradient();
    if constexpr (low_precision) {
      if constexpr (!with_lora) precision::round_in_place<compute_dtype>(param_gradient<params, 0>(io_), kernel_floats);
      precision::round_in_place<compute_dtype>(param_gradient<params, 1>(io_), static_cast<std::size_t>(units));
    }
    if (io_.d_in) input_grad_.run();
    if constexpr (with_lora) adapter_.backward();  // after d_in is written: it adds to it
    if constexpr (low_precision)
      if (io_.d_in) precision::round_in_place<compute_dtype>(io_.d_in, input_count);
  }

 private:
  static constexpr std::size_t input_count = static_cast<std::size_t>(rows) * in_features;
  static constexpr std::size_t output_count = static_cast<std::size_t>(rows) * units;

  // Scratch: the rounded input, the output before storing, the rounded weights.
  static constexpr std::size_t output_offset = align_up(input_count * sizeof(float));
  static constexpr std::size_t weights_offset =
      output_offset + (stores_16bit ? align_up(output_count * sizeof(float)) : 0);
  float* rounded_input() const { return reinterpret_cast<float*>(io_.scratch); }
  float* output_before_storing() const { return reinterpret_cast<float*>(io_.scratch + output_offset); }
  float* rounded_kernel() const { return reinterpret_cast<float*>(io_.scratch + weights_offset); }

  // The weights as this step's product sees them (Keras casts them at each call).
  void round_weights() {
    precision::round_into<compute_dtype>(param_data<params, 0>(io_), rounded_kernel(), kernel_floats);
    precision::round_into<compute_dtype>(param_data<params, 1>(io_), rounded_kernel() + kernel_floats, bias_floats);
  }
  template <std::size_t P>
  static constexpr int row_stride = [] {
    if constexpr (P < params::count) return static_cast<int>(std::tuple_element_t<P, typename params::tuple>::row_stride);
    else return 0;
  }();
  // The input as float32, holding values of the compute dtype.
  void round_input() {
    if constexpr (std::is_same_v<input_dtype, float32>) {
      precision::round_into<compute_dtype>(io_.in, rounded_input(), input_count);
    } else {
      // Stored in 16 bits: a float32 layer reads the values as they are,
      // a 16-bit one of the other kind rounds them again.
      precision::to_float<input_dtype>(reinterpret_cast<const typename input_dtype::value_type*>(io_.in),
                                       rounded_input(), input_count);
      if constexpr (low_precision && !std::is_same_v<input_dtype, compute_dtype>)
        precision::round_in_place<compute_dtype>(rounded_input(), input_count);
    }
  }

  // The native bf16 path (Layer::native_bf16_possible). Workspace, kept from
  // forward to backward: the kernel in bf16 (kept from step to step too,
  // precision/weight_copies.hpp), then the input in bf16 when it arrives in
  // float32. Scratch: d_out in bf16, then the bias rounded.
  static constexpr bool native_possible = Layer::native_bf16_possible;
  static constexpr bool reads_bf16_input = std::is_same_v<input_dtype, bfloat16>;
  using bf16_t = bfloat16::value_type;
  static constexpr std::size_t native_input_offset = align_up(kernel_floats * sizeof(bf16_t));
  static constexpr std::size_t native_bias_offset = align_up(output_count * sizeof(bf16_t));
  static_assert(!native_possible || native_bias_offset + bias_floats * sizeof(float) <=
                                        Batch * Layer::scratch_bytes_per_sample + Layer::scratch_bytes_per_step,
                "dense: the native bf16 path's scratch exceeds the layer's");
  static_assert(!native_possible || native_input_offset + (reads_bf16_input ? 0 : input_count * sizeof(bf16_t)) <=
                                        Batch * Layer::workspace_bytes_per_sample + Layer::workspace_bytes_per_step,
                "dense: the native bf16 path's kept operands exceed the layer's workspace");
  bf16_t* d_out_bf16() const { return reinterpret_cast<bf16_t*>(io_.scratch); }
  const bf16_t* input_bf16() const {
    if constexpr (reads_bf16_input) return reinterpret_cast<const bf16_t*>(io_.in);
    else return reinterpret_cast<const bf16_t*>(io_.workspace + native_input_offset);
  }
  bf16_t* kernel_bf16() const { return reinterpret_cast<bf16_t*>(io_.workspace); }
  float* bias_rounded() const { return reinterpret_cast<float*>(io_.scratch + native_bias_offset); }

  void bind_native(std::byte* scratchpad) {
    forward_.bind(input_bf16(), kernel_bf16(), bias_rounded(), io_.out, scratchpad);
    if constexpr (!with_lora) kernel_grad_.bind(input_bf16(), d_out_bf16(), nullptr, param_gradient<params, 0>(io_), scratchpad);
    if (io_.d_in) input_grad_.bind(d_out_bf16(), kernel_bf16(), nullptr, io_.d_in, scratchpad);
  }
  void forward_native() {
    precision::refresh(io_.context->weight_copies, kernel_copy_);  // the kernel in bf16, kept from the last step
    if constexpr (!reads_bf16_input)
      precision::from_float<bfloat16>(io_.in, const_cast<bf16_t*>(input_bf16()), input_count);
    precision::round_into<bfloat16>(param_data<params, 1>(io_), bias_rounded(), bias_floats);
    forward_.run();
    if constexpr (!stores_16bit) precision::round_in_place<bfloat16>(io_.out, output_count);
  }
  void backward_native() {
    precision::round_in_place_and_store<bfloat16>(const_cast<float*>(io_.d_out), d_out_bf16(), output_count);
    kernel_grad_.run();
    bias_gradient();
    precision::round_in_place<bfloat16>(param_gradient<params, 0>(io_), kernel_floats);
    precision::round_in_place<bfloat16>(param_gradient<params, 1>(io_), static_cast<std::size_t>(units));
    if (io_.d_in) {
      input_grad_.run();
      precision::round_in_place<bfloat16>(io_.d_in, input_count);
    }
  }

  // d_bias (units) = the column sums of d_out (rows, units).
  void bias_gradient() { typeflow::column_sums(io_.d_out, rows, units, param_gradient<params, 1>(io_)); }

  layer_io<cpu> io_;
  bool native_;  // bf16 products run as oneDNN bf16 primitives
  std::size_t kernel_copy_ = 0;  // native: the kernel's bf16 copy among the context's weight copies
  backend::cpu::matmul forward_, kernel_grad_, input_grad_;
  backend::cpu::lora_adapter adapter_;  // with lora<> only
};

}  // namespace typeflow

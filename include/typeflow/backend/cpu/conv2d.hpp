// conv2d and depthwise_conv2d on the CPU (layers/conv2d.hpp): oneDNN's
// convolution primitives (forward, backward-data, backward-weights), created
// once per batch size and bound once to the arena. A relu, tanh or sigmoid
// that follows runs as a oneDNN post-op.
//
// Activations are plain channels-last (nhwc), so no activation is
// reordered: on this project's 2-core AVX2 machine, at the MNIST CNN's
// batch 128, oneDNN 2.6.3 picks jit:avx2 for nhwc, and letting it choose
// blocked activation formats instead gained nothing once the reorders of the
// activations and their gradients were paid (and lost 3x on the first
// layer's backward-weights). The kernel is stored in Keras's layout with
// padded rows (see padded_row_length); each forward reorders it into the
// format oneDNN chose (kept in the workspace for backward-data), and the
// kernel gradient is computed in oneDNN's format (scratch) and reordered
// into the padded layout, so the padding's gradient stays zero.
//
// Under a 16-bit compute dtype (layers/conv2d.hpp), two ways, as dense's:
//  - native (bfloat16 where oneDNN runs bf16 convolutions on AVX512-BF16 or
//    AMX; backend/cpu/products_16bit.hpp): bf16 primitives with float32
//    accumulation, bias, output and gradients. Forward converts the input to
//    bf16 (kept in the workspace for backward-weights) and reorders the
//    kernel straight into a bf16 format; backward converts d_out to bf16.
//  - emulated (AVX2, float16): the float32 primitives on rounded operands
//    (the input rounded into scratch, the kernel copies rounded after their
//    reorders, d_out rounded in place), the results rounded after.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "typeflow/backend/cpu/context.hpp"
#if !TYPEFLOW_HAS_ONEDNN_CPP
#error "typeflow/backend/cpu/conv2d.hpp needs oneDNN's C++ header, which nvcc 13 cannot compile (see backend/cpu/context.hpp): CPU executors belong in .cpp files"
#endif

#include <oneapi/dnnl/dnnl.hpp>

#include "typeflow/core/foreign_calls.hpp"
#include "typeflow/layers/conv2d.hpp"
#include "typeflow/contract/executor.hpp"
#include "typeflow/precision/storage.hpp"

namespace typeflow {

namespace detail::convolution {

// One convolution as oneDNN sees it, for one batch size.
struct problem {
  const char* layer = "conv2d";  // for messages
  int batch = 0, height = 0, width = 0, channels = 0;
  int out_height = 0, out_width = 0, out_channels = 0;
  int groups = 1;  // depthwise: groups = channels, one input channel per group
  int kernel_height = 0, kernel_width = 0;
  int stride_height = 1, stride_width = 1, dilation_height = 1, dilation_width = 1;
  int pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int kernel_row_stride = 0;  // floats between the kernel's rows in the arena
  bool with_bias = true;
  epilogue after = epilogue::none;
  bool input_gradient = true;        // whether backward writes d_in
  std::size_t weights_reserved = 0;  // bytes of each kernel copy in workspace and scratch
  // Native bf16: the input, kernel and d_out in bf16, everything else float32.
  bool bf16 = false;
  // Emulated 16 bits: rounds the float32 kernel copies in oneDNN's formats
  // after each reorder (nullptr: no rounding).
  void (*round_weights)(float*, std::size_t) = nullptr;
};

// The fixed addresses a convolution runs on.
struct buffers {
  const void* in = nullptr;     // (B, H, W, C), bf16 on the native path
  float* out = nullptr;         // (B, Hout, Wout, O)
  const void* d_out = nullptr;  // bf16 on the native path
  float* d_in = nullptr;        // nullptr: no input gradient
  const float* kernel = nullptr;  // Keras's layout, padded rows
  const float* bias = nullptr;
  float* d_kernel = nullptr;      // the same layout
  float* d_bias = nullptr;
  std::byte* forward_weights = nullptr;   // workspace: the kernel in the forward's format, kept for backward-data
  std::byte* data_weights = nullptr;      // scratch: the kernel in backward-data's format, when that differs
  std::byte* weight_gradient = nullptr;   // scratch: the kernel gradient in backward-weights' format
};

// The three convolution primitives and the kernel reorders around them.
class primitives {
  using md = dnnl::memory::desc;
  using dims = dnnl::memory::dims;
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;

 public:
  primitives() = default;

  primitives(backend::cpu::context& ctx, const problem& p) : ctx_(&ctx), p_(p) {
    const dnnl::memory::dim n = p.batch, c = p.channels, h = p.height, w = p.width;
    const dnnl::memory::dim o = p.out_channels, oh = p.out_height, ow = p.out_width;
    const dt operands = p.bf16 ? dt::bf16 : dt::f32;
    src_md_ = md({n, c, h, w}, operands, tag::nhwc);
    diff_src_md_ = md({n, c, h, w}, dt::f32, tag::nhwc);
    dst_md_ = md({n, o, oh, ow}, dt::f32, tag::nhwc);
    diff_dst_md_ = md({n, o, oh, ow}, operands, tag::nhwc);
    kernel_md_ = arena_kernel_desc(p);
    bias_md_ = p.with_bias ? md({o}, dt::f32, tag::x) : md();
    const md weights_any(kernel_md_.dims(), operands, tag::any);
    const md weight_gradient_any(kernel_md_.dims(), dt::f32, tag::any);
    const dims strides{p.stride_height, p.stride_width};
    const dims dilates{p.dilation_height - 1, p.dilation_width - 1};  // oneDNN counts the gaps
    const dims pad_l{p.pad_top, p.pad_left}, pad_r{p.pad_bottom, p.pad_right};
    const auto direct = dnnl::algorithm::convolution_direct;

    try {
      // Each pd gets its own attr: primitive_attr copies share one object.
      dnnl::post_ops ops;
      if (p.after != epilogue::none) ops.append_eltwise(1.f, algorithm_of(p.after), 0.f, 0.f);
      forward_pd_ = dnnl::convolution_forward::primitive_desc(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct, src_md_, weights_any, bias_md_,
                                          dst_md_, strides, dilates, pad_l, pad_r),
          user_scratchpad(ops), ctx.engine);
      if (p.input_gradient)
        data_pd_ = dnnl::convolution_backward_data::primitive_desc(
            dnnl::convolution_backward_data::desc(direct, diff_src_md_, weights_any, diff_dst_md_, strides, dilates,
                                                  pad_l, pad_r),
            user_scratchpad(), ctx.engine, forward_pd_);
      weights_pd_ = dnnl::convolution_backward_weights::primitive_desc(
          p.with_bias ? dnnl::convolution_backward_weights::desc(direct, src_md_, weight_gradient_any, bias_md_,
                                                                 diff_dst_md_, strides, dilates, pad_l, pad_r)
                      : dnnl::convolution_backward_weights::desc(direct, src_md_, weight_gradient_any, diff_dst_md_,
                                                                 strides, dilates, pad_l, pad_r),
          user_scratchpad(), ctx.engine, forward_pd_);
    } catch (const dnnl::error& e) {
      throw std::runtime_error("typeflow: " + std::string(p.layer) + ": oneDNN has no " + (p.bf16 ? "bf16 " : "") +
                               "convolution for input (" +
                               std::to_string(h) + ", " + std::to_string(w) + ", " + std::to_string(c) +
                               ") -> (" + std::to_string(oh) + ", " + std::to_string(ow) + ", " +
                               std::to_string(o) + "): " + e.what());
    }
    forward_ = dnnl::convolution_forward(forward_pd_);
    weights_ = dnnl::convolution_backward_weights(weights_pd_);
    check_reserved(forward_pd_.weights_desc(), "forward");
    check_reserved(weights_pd_.diff_weights_desc(), "backward-weights");
    to_forward_ = make_reorder(kernel_md_, forward_pd_.weights_desc());
    from_gradient_ = make_reorder(weights_pd_.diff_weights_desc(), kernel_md_);
    if (p.input_gradient) {
      data_ = dnnl::convolution_backward_data(data_pd_);
      // Backward-data reads the forward's copy when the formats agree.
      own_data_weights_ = data_pd_.weights_desc() != forward_pd_.weights_desc();
      if (own_data_weights_) {
        check_reserved(data_pd_.weights_desc(), "backward-data");
        to_data_ = make_reorder(kernel_md_, data_pd_.weights_desc());
      }
    }
  }

  std::size_t scratchpad_bytes() const {
    std::size_t bytes = 0;
    const std::array<const dnnl::primitive_desc_base*, 6> pds{&forward_pd_, &data_pd_,     &weights_pd_,
                                                              &to_forward_.pd, &to_data_.pd, &from_gradient_.pd};
    for (const dnnl::primitive_desc_base* pd : pds)
      if (*pd) bytes = std::max(bytes, pd->scratchpad_desc().get_size());
    return bytes;
  }

  // Which implementations oneDNN chose: forward, backward-data, backward-weights.
  std::string implementations() const {
    return std::string(forward_pd_.impl_info_str()) + ", " + (data_pd_ ? data_pd_.impl_info_str() : "none") + ", " +
           weights_pd_.impl_info_str();
  }
  // Whether the bf16 primitives run on the CPU's bf16 instructions (a
  // reference or emulating kernel would be slower than float32).
  bool native_bf16() const {
    const std::string impls = implementations();
    return p_.bf16 && impls.find("ref") == std::string::npos && impls.find("bf16") != std::string::npos;
  }

  void bind(const buffers& b, std::byte* scratchpad) {
    auto& engine = ctx_->engine;
    auto memory = [&](const md& desc, const void* address) {
      return dnnl::memory(desc, engine, const_cast<void*>(address));
    };
    src_ = memory(src_md_, b.in);
    dst_ = memory(dst_md_, b.out);
    diff_dst_ = memory(diff_dst_md_, b.d_out);
    kernel_ = memory(kernel_md_, b.kernel);
    d_kernel_ = memory(kernel_md_, b.d_kernel);
    forward_weights_ = memory(forward_pd_.weights_desc(), b.forward_weights);
    weight_gradient_ = memory(weights_pd_.diff_weights_desc(), b.weight_gradient);
    // One scratchpad, described to each primitive as its own.
    forward_scratchpad_ = memory(forward_pd_.scratchpad_desc(), scratchpad);
    weights_scratchpad_ = memory(weights_pd_.scratchpad_desc(), scratchpad);
    if (p_.with_bias) {
      bias_ = memory(bias_md_, b.bias);
      d_bias_ = memory(bias_md_, b.d_bias);
    }

    to_forward_.bind(kernel_, forward_weights_, engine, scratchpad);
    forward_args_.clear();
    forward_args_.add(DNNL_ARG_SRC, src_).add(DNNL_ARG_WEIGHTS, forward_weights_).add(DNNL_ARG_DST, dst_);
    forward_args_.add(DNNL_ARG_SCRATCHPAD, forward_scratchpad_);
    if (p_.with_bias) forward_args_.add(DNNL_ARG_BIAS, bias_);

    weights_args_.clear();
    weights_args_.add(DNNL_ARG_SRC, src_).add(DNNL_ARG_DIFF_DST, diff_dst_);
    weights_args_.add(DNNL_ARG_DIFF_WEIGHTS, weight_gradient_).add(DNNL_ARG_SCRATCHPAD, weights_scratchpad_);
    if (p_.with_bias) weights_args_.add(DNNL_ARG_DIFF_BIAS, d_bias_);
    from_gradient_.bind(weight_gradient_, d_kernel_, engine, scratchpad);

    data_args_.clear();
    if (p_.input_gradient && b.d_in) {
      diff_src_ = memory(diff_src_md_, b.d_in);
      data_scratchpad_ = memory(data_pd_.scratchpad_desc(), scratchpad);
      dnnl::memory weights = forward_weights_;
      if (own_data_weights_) {
        data_weights_ = memory(data_pd_.weights_desc(), b.data_weights);
        to_data_.bind(kernel_, data_weights_, engine, scratchpad);
        weights = data_weights_;
      }
      data_args_.add(DNNL_ARG_DIFF_DST, diff_dst_).add(DNNL_ARG_WEIGHTS, weights);
      data_args_.add(DNNL_ARG_DIFF_SRC, diff_src_).add(DNNL_ARG_SCRATCHPAD, data_scratchpad_);
    }
  }

  void forward() const {
    to_forward_.run(*ctx_);
    round(forward_weights_);
    execute(*ctx_, forward_, forward_args_, "forward");
  }

  // Writes the kernel and bias gradients and, when bound, d_in.
  void backward() const {
    execute(*ctx_, weights_, weights_args_, "backward-weights");
    from_gradient_.run(*ctx_);
    if (data_args_.count == 0) return;
    if (own_data_weights_) {
      to_data_.run(*ctx_);
      round(data_weights_);
    }
    execute(*ctx_, data_, data_args_, "backward-data");
  }

 private:
  struct arguments;
  static void execute(const backend::cpu::context& ctx, const dnnl::primitive& primitive, const arguments& args,
                      const char* what);

  struct arguments {
    std::array<dnnl_exec_arg_t, 6> items{};
    int count = 0;
    void clear() { count = 0; }
    arguments& add(int name, const dnnl::memory& m) {
      items[static_cast<std::size_t>(count++)] = {name, m.get()};
      return *this;
    }
  };

  struct reorder {
    dnnl::reorder::primitive_desc pd;
    dnnl::reorder primitive;
    dnnl::memory scratchpad;
    arguments args;
    void bind(const dnnl::memory& from, const dnnl::memory& to, const dnnl::engine& engine, std::byte* address) {
      scratchpad = dnnl::memory(pd.scratchpad_desc(), engine, address);
      args.clear();
      args.add(DNNL_ARG_FROM, from).add(DNNL_ARG_TO, to).add(DNNL_ARG_SCRATCHPAD, scratchpad);
    }
    void run(const backend::cpu::context& ctx) const { execute(ctx, primitive, args, "reorder"); }
  };

  // A float32 kernel copy rounded in place, when emulating 16 bits (its
  // format's padding holds zeros, which stay zeros).
  void round(const dnnl::memory& weights) const {
    if (p_.round_weights)
      p_.round_weights(static_cast<float*>(weights.get_data_handle()), weights.get_desc().get_size() / sizeof(float));
  }

  static dnnl::primitive_attr user_scratchpad(const dnnl::post_ops& ops = dnnl::post_ops()) {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_post_ops(ops);
    return attr;
  }

  reorder make_reorder(const md& from, const md& to) const {
    reorder r;
    r.pd = dnnl::reorder::primitive_desc(ctx_->engine, from, ctx_->engine, to, user_scratchpad());
    r.primitive = dnnl::reorder(r.pd);
    return r;
  }

  // Keras's kernel, (kh, kw, C, O) with rows of O padded to kernel_row_stride,
  // as oneDNN's logical (O, I, kh, kw); depthwise (kh, kw, C, M) as (G = C,
  // M, 1, kh, kw), element (i, j, c, m) at ((i * kw + j) * C + c) * stride + m.
  static md arena_kernel_desc(const problem& p) {
    const dnnl::memory::dim rs = p.kernel_row_stride, c = p.channels, kh = p.kernel_height, kw = p.kernel_width;
    if (p.groups == 1) return md({p.out_channels, c, kh, kw}, dt::f32, dims{1, rs, kw * c * rs, c * rs});
    const dnnl::memory::dim g = p.groups, m = p.out_channels / p.groups;
    return md({g, m, 1, kh, kw}, dt::f32, dims{rs, 1, rs, kw * c * rs, c * rs});
  }

  void check_reserved(const md& chosen, const char* pass) const {
    if (chosen.get_size() > p_.weights_reserved)
      throw std::runtime_error("typeflow: " + std::string(p_.layer) + ": oneDNN's " + pass +
                               " convolution wants its kernel in a format of " + std::to_string(chosen.get_size()) +
                               " bytes, more than the " + std::to_string(p_.weights_reserved) +
                               " bytes the layer reserves (detail::convolution::weights_bytes_bound)");
  }


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

  backend::cpu::context* ctx_ = nullptr;
  problem p_{};
  md src_md_, diff_src_md_, dst_md_, diff_dst_md_, kernel_md_, bias_md_;
  dnnl::convolution_forward::primitive_desc forward_pd_;
  dnnl::convolution_backward_data::primitive_desc data_pd_;
  dnnl::convolution_backward_weights::primitive_desc weights_pd_;
  dnnl::convolution_forward forward_;
  dnnl::convolution_backward_data data_;
  dnnl::convolution_backward_weights weights_;
  reorder to_forward_, to_data_, from_gradient_;
  bool own_data_weights_ = false;
  dnnl::memory src_, dst_, diff_dst_, diff_src_, kernel_, d_kernel_, bias_, d_bias_;
  dnnl::memory forward_weights_, data_weights_, weight_gradient_;
  dnnl::memory forward_scratchpad_, data_scratchpad_, weights_scratchpad_;
  arguments forward_args_, data_args_, weights_args_;
};

inline void primitives::execute(const backend::cpu::context& ctx, const dnnl::primitive& primitive,
                                const arguments& args, const char* what) {
  detail::foreign_call_scope foreign;
  const dnnl_status_t status = dnnl_primitive_execute(primitive.get(), ctx.stream.get(), args.count, args.items.data());
  if (status != dnnl_success)
    throw std::runtime_error("typeflow: oneDNN convolution " + std::string(what) + " failed with status " +
                             std::to_string(status));
}

// The executor both layers share; Layer is the bound layer of Spec.
template <class Spec, class Layer, int Batch>
class cpu_executor {
  using compute_dtype = typename Layer::compute_dtype;
  static constexpr bool low_precision = Layer::low_precision;
  using bf16_t = bfloat16::value_type;

 public:
  explicit cpu_executor(const layer_io<cpu>& io) : io_(io), conv_(choose(io)) {}

  std::size_t scratchpad_bytes() const { return conv_.scratchpad_bytes(); }
  std::string implementations() const { return conv_.implementations(); }
  bool native_bf16() const { return native_; }

  void bind(std::byte* scratchpad) {
    using params = typename Layer::params;
    buffers b;
    b.in = native_ ? static_cast<const void*>(input_bf16()) : low_precision ? rounded_input() : io_.in;
    b.out = io_.out;
    b.d_out = native_ ? static_cast<const void*>(d_out_bf16()) : io_.d_out;
    b.d_in = io_.d_in;
    b.kernel = io_.params + params::template offset<0>;
    b.d_kernel = io_.grads + params::template offset<0>;
    if constexpr (Layer::with_bias) {
      b.bias = low_precision ? bias_rounded() : io_.params + params::template offset<1>;
      b.d_bias = io_.grads + params::template offset<1>;
    }
    b.forward_weights = io_.workspace;
    b.data_weights = io_.scratch + weights_at;
    b.weight_gradient = io_.scratch + weights_at + align_up(Layer::weights_reserved);
    conv_.bind(b, scratchpad);
  }

  // In 16 bits (either path) the product sees the input, kernel, bias and
  // d_out rounded, and its results are rounded: the values of a 16-bit
  // convolution with float32 accumulation.
  void forward() {
    if constexpr (low_precision) {
      if (native_) precision::from_float<bfloat16>(io_.in, input_bf16(), input_count);
      else precision::round_into<compute_dtype>(io_.in, rounded_input(), input_count);
      if constexpr (Layer::with_bias)
        precision::round_into<compute_dtype>(param_data<typename Layer::params, 1>(io_), bias_rounded(),
                                             Layer::out_channels);
    }
    conv_.forward();
    if constexpr (low_precision) precision::round_in_place<compute_dtype>(io_.out, output_count);
  }

  void backward() {
    if constexpr (low_precision) {
      // The gradient arriving here is this layer's to use up. (The bf16
      // primitives read only its bf16 copy, but rounding the float32 values
      // in the same pass measured faster than converting alone: 6.2 against
      // 6.45 ms a MNIST CNN step.)
      if (native_) {
        precision::round_in_place_and_store<bfloat16>(const_cast<float*>(io_.d_out), d_out_bf16(), output_count);
      } else {
        precision::round_in_place<compute_dtype>(const_cast<float*>(io_.d_out), output_count);
        precision::round_into<compute_dtype>(io_.in, rounded_input(), input_count);  // scratch did not outlive forward
      }
    }
    conv_.backward();
    if constexpr (low_precision) {
      using params = typename Layer::params;
      precision::round_in_place<compute_dtype>(io_.grads + params::template offset<0>, kernel_floats);
      if constexpr (Layer::with_bias)
        precision::round_in_place<compute_dtype>(io_.grads + params::template offset<1>, Layer::out_channels);
      if (io_.d_in) precision::round_in_place<compute_dtype>(io_.d_in, input_count);
    }
  }

 private:
  static constexpr std::size_t input_count = static_cast<std::size_t>(Batch) * Layer::input_shape::size;
  static constexpr std::size_t output_count = static_cast<std::size_t>(Batch) * Layer::output_shape::size;
  static constexpr std::size_t kernel_floats = std::tuple_element_t<0, typename Layer::params::tuple>::stored_floats;

  // Workspace: the kernel in the forward's format, then (native) the input
  // in bf16, kept for backward-weights. Scratch, in 16 bits: the input
  // rounded (emulated) or d_out in bf16 (native), the bias rounded; then
  // the kernel copies for backward-data and the kernel gradient.
  static constexpr std::size_t operands_bytes =
      low_precision ? align_up(static_cast<std::size_t>(Batch) * Layer::scratch_bytes_per_sample) : 0;
  static constexpr std::size_t bias_at = operands_bytes;
  static constexpr std::size_t weights_at =
      bias_at + (low_precision ? align_up(Layer::out_channels * sizeof(float)) : 0);
  static_assert(weights_at + 2 * align_up(Layer::weights_reserved) <=
                    Batch * Layer::scratch_bytes_per_sample + Layer::scratch_bytes_per_step,
                "conv2d: the executor's scratch exceeds the layer's");
  static_assert(!Layer::native_bf16_possible ||
                    align_up(Layer::weights_reserved) + input_count * sizeof(bf16_t) <=
                        Batch * Layer::workspace_bytes_per_sample + Layer::workspace_bytes_per_step,
                "conv2d: the native bf16 path's kept input exceeds the layer's workspace");
  float* rounded_input() const { return reinterpret_cast<float*>(io_.scratch); }
  bf16_t* d_out_bf16() const { return reinterpret_cast<bf16_t*>(io_.scratch); }
  float* bias_rounded() const { return reinterpret_cast<float*>(io_.scratch + bias_at); }
  bf16_t* input_bf16() const { return reinterpret_cast<bf16_t*>(io_.workspace + align_up(Layer::weights_reserved)); }

  // The bf16 primitives where the layer may use them and oneDNN runs them on
  // bf16 instructions here; float32 ones otherwise (emulating 16 bits when
  // the policy computes in 16).
  primitives choose(const layer_io<cpu>& io) {
    if constexpr (Layer::native_bf16_possible) {
      if (io.context->native_bf16) {
        problem p = problem_for(io.d_in != nullptr);
        p.bf16 = true;
        p.round_weights = nullptr;  // oneDNN's reorders round to bf16
        try {
          primitives native(*io.context, p);
          if (native.native_bf16()) {
            native_ = true;
            return native;
          }
        } catch (const std::runtime_error&) {
          // oneDNN has no bf16 convolution of this shape here: emulate it.
        }
      }
    }
    return primitives(*io.context, problem_for(io.d_in != nullptr));
  }

  // The layer's geometry as oneDNN sees it, for this batch size.
  static constexpr problem problem_for(bool input_gradient) {
    using geometry = typename Layer::geometry;
    problem p;
    p.layer = Spec::scope_name.data();
    p.batch = Batch;
    p.height = geometry::rows.in;
    p.width = geometry::cols.in;
    p.channels = geometry::channels;
    p.out_height = geometry::rows.out();
    p.out_width = geometry::cols.out();
    p.out_channels = Layer::out_channels;
    p.groups = Layer::groups;
    p.kernel_height = geometry::rows.kernel;
    p.kernel_width = geometry::cols.kernel;
    p.stride_height = geometry::rows.stride;
    p.stride_width = geometry::cols.stride;
    p.dilation_height = geometry::rows.dilation;
    p.dilation_width = geometry::cols.dilation;
    p.pad_top = geometry::rows.pad_before();
    p.pad_bottom = geometry::rows.pad_after();
    p.pad_left = geometry::cols.pad_before();
    p.pad_right = geometry::cols.pad_after();
    p.kernel_row_stride = static_cast<int>(Layer::kernel_param::row_stride);
    p.with_bias = Layer::with_bias;
    p.after = Layer::fused;
    p.input_gradient = input_gradient;
    p.weights_reserved = Layer::weights_reserved;
    if constexpr (low_precision) p.round_weights = &precision::round_in_place<compute_dtype>;
    return p;
  }

  layer_io<cpu> io_;
  bool native_ = false;  // set by choose(), before conv_ is built
  primitives conv_;
};

}  // namespace detail::convolution

template <int Filters, window Kernel, window Strides, padding Padding, class... Options, class Layer, int Batch>
class executor<conv2d<Filters, Kernel, Strides, Padding, Options...>, Layer, Batch, cpu>
    : public detail::convolution::cpu_executor<conv2d<Filters, Kernel, Strides, Padding, Options...>, Layer, Batch> {
 public:
  explicit executor(const layer_io<cpu>& io)
      : detail::convolution::cpu_executor<conv2d<Filters, Kernel, Strides, Padding, Options...>, Layer, Batch>(io) {}
};

template <window Kernel, window Strides, padding Padding, class... Options, class Layer, int Batch>
class executor<depthwise_conv2d<Kernel, Strides, Padding, Options...>, Layer, Batch, cpu>
    : public detail::convolution::cpu_executor<depthwise_conv2d<Kernel, Strides, Padding, Options...>, Layer, Batch> {
 public:
  explicit executor(const layer_io<cpu>& io)
      : detail::convolution::cpu_executor<depthwise_conv2d<Kernel, Strides, Padding, Options...>, Layer, Batch>(io) {}
};

}  // namespace typeflow

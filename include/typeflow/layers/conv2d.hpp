// conv2d and depthwise_conv2d: 2-D convolutions over channels-last samples,
// as Keras's Conv2D and DepthwiseConv2D (data_format="channels_last").
//
//   conv2d<Filters, Kernel, Strides = 1, Padding = valid, Options...>
//     input   (B, H, W, C)
//     kernel  (kh, kw, C, Filters)   glorot_uniform, a kernel
//     bias    (Filters,)             zeros, a bias (absent with use_bias<false>)
//     output  (B, Hout, Wout, Filters)
//
//   depthwise_conv2d<Kernel, Strides = 1, Padding = valid, Options...>
//     input             (B, H, W, C)
//     depthwise_kernel  (kh, kw, C, M)   glorot_uniform, a kernel; M = depth_multiplier<M>, 1 by default
//     bias              (C * M,)         zeros, a bias (absent with use_bias<false>)
//     output            (B, Hout, Wout, C * M); channel c * M + m is input
//                       channel c convolved with depthwise_kernel[:, :, c, m]
//
// Kernel and Strides are windows (window.hpp): conv2d<32, 3> is a 3 x 3
// kernel, conv2d<64, window{3, 5}, 2> a 3 x 5 one moved 2 rows and 2 columns
// at a time. Output lengths, per axis, with the dilated kernel ke = d * (k - 1) + 1:
//   valid: out = floor((in - ke) / stride) + 1
//   same:  out = ceil(in / stride), the input padded with zeros by
//          max((out - 1) * stride + ke - in, 0), the smaller half on the
//          top/left, the rest on the bottom/right (TensorFlow's rule)
//
// Options: dilation<window> (Keras's dilation_rate, 1 by default),
// use_bias<bool> (true by default), kernel_initializer<I>,
// bias_initializer<I>, kernel_regularizer<R>, bias_regularizer<R>, and for
// depthwise_conv2d depth_multiplier<M>; the kernel options apply to its
// depthwise_kernel (Keras's depthwise_initializer, depthwise_regularizer).
// e.g. conv2d<64, window{3, 5}, 2, padding::same, dilation<2>, use_bias<false>>.
//
// When a relu, tanh or sigmoid follows, it runs inside the convolution as a
// oneDNN post-op and the activation layer only applies its derivative in
// backward, as after a dense.
//
// Both run on oneDNN's convolution primitives (forward, backward-data,
// backward-weights), created once per batch size and bound once to the
// arena. Activations are plain channels-last (nhwc), so no activation is
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
// They compute in float32 under every precision policy.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "typeflow/backend/cpu/context.hpp"
#if TYPEFLOW_HAS_ONEDNN_CPP
#include <oneapi/dnnl/dnnl.hpp>
#endif

#include "typeflow/backend/cpu/matmul.hpp"
#include "typeflow/core/dtype.hpp"
#include "typeflow/core/foreign_calls.hpp"
#include "typeflow/core/shape.hpp"
#include "typeflow/initializers/initializers.hpp"
#include "typeflow/layers/activation_traits.hpp"
#include "typeflow/layers/options.hpp"
#include "typeflow/layers/window.hpp"
#include "typeflow/model/layer.hpp"

namespace typeflow {

// Options of the convolutions.
template <window D>
struct dilation {};
template <bool B>
struct use_bias {};
template <int M>
struct depth_multiplier {};

namespace detail::convolution {

// What an option sets, for the options beyond options.hpp's.
template <class Option>
struct option_traits {
  static constexpr int dilations = 0, bias_flags = 0, multipliers = 0;
};
template <window D>
struct option_traits<dilation<D>> {
  static constexpr int dilations = 1, bias_flags = 0, multipliers = 0;
  static constexpr window value = D;
};
template <bool B>
struct option_traits<use_bias<B>> {
  static constexpr int dilations = 0, bias_flags = 1, multipliers = 0;
  static constexpr bool value = B;
};
template <int M>
struct option_traits<depth_multiplier<M>> {
  static constexpr int dilations = 0, bias_flags = 0, multipliers = 1;
  static constexpr int value = M;
};

template <class... Options>
constexpr window dilation_of() {
  window d{1};
  ([&] { if constexpr (option_traits<Options>::dilations == 1) d = option_traits<Options>::value; }(), ...);
  return d;
}
template <class... Options>
constexpr bool bias_of() {
  bool b = true;
  ([&] { if constexpr (option_traits<Options>::bias_flags == 1) b = option_traits<Options>::value; }(), ...);
  return b;
}
template <class... Options>
constexpr int multiplier_of() {
  int m = 1;
  ([&] { if constexpr (option_traits<Options>::multipliers == 1) m = option_traits<Options>::value; }(), ...);
  return m;
}

constexpr int positive_or_one(int n) { return n > 0 ? n : 1; }

// Axis `axis` of a rank-3 shape; 1 for any other rank, so that a failed rank
// check is the only error.
template <class In>
constexpr int input_dim(std::size_t axis) {
  if constexpr (In::rank == 3) return In::dims[axis];
  else return 1;
}

// One spatial axis: Keras's output length and TensorFlow's split of the padding.
struct axis {
  int in, kernel, stride, dilation;  // each at least 1
  bool same;
  constexpr int effective_kernel() const { return dilation * (kernel - 1) + 1; }
  constexpr bool nonempty() const { return same || in >= effective_kernel(); }
  // 1 for an empty output, which is reported on its own.
  constexpr int out() const {
    if (same) return (in + stride - 1) / stride;
    return nonempty() ? (in - effective_kernel()) / stride + 1 : 1;
  }
  constexpr int pad_total() const { return same ? std::max((out() - 1) * stride + effective_kernel() - in, 0) : 0; }
  constexpr int pad_before() const { return pad_total() / 2; }
  constexpr int pad_after() const { return pad_total() - pad_before(); }
};

// The sliding-window facts both layers share, with every value clamped to
// at least 1 after its check.
template <class In, window Kernel, window Strides, padding Padding, window Dilation>
struct geometry {
  static constexpr bool rank_ok = In::rank == 3;
  static constexpr bool kernel_ok = Kernel.height > 0 && Kernel.width > 0;
  static constexpr bool strides_ok = Strides.height > 0 && Strides.width > 0;
  static constexpr bool dilation_ok = Dilation.height > 0 && Dilation.width > 0;
  static constexpr int channels = input_dim<In>(2);
  static constexpr axis rows{input_dim<In>(0), positive_or_one(Kernel.height), positive_or_one(Strides.height),
                             positive_or_one(Dilation.height), Padding == padding::same};
  static constexpr axis cols{input_dim<In>(1), positive_or_one(Kernel.width), positive_or_one(Strides.width),
                             positive_or_one(Dilation.width), Padding == padding::same};
  static constexpr bool nonempty = rows.nonempty() && cols.nonempty();
};

// The bytes reserved for the kernel in a format oneDNN chooses: blocked
// formats pad channel counts to blocks of 8 (AVX2) or 16 (AVX-512), the
// grouped ones either the groups (depthwise, Goihw8g) or the channels per
// group (gOIhw8i8o). The constructor checks the formats it gets against this.
constexpr std::size_t round16(std::size_t n) { return (n + 15) / 16 * 16; }
constexpr std::size_t weights_bytes_bound(int groups, int in_channels, int out_channels, int kh, int kw) {
  const std::size_t g = static_cast<std::size_t>(groups);
  const std::size_t in_per_group = static_cast<std::size_t>(in_channels) / g;
  const std::size_t out_per_group = static_cast<std::size_t>(out_channels) / g;
  const std::size_t taps = static_cast<std::size_t>(kh) * static_cast<std::size_t>(kw);
  const std::size_t floats =
      groups == 1 ? round16(out_per_group) * round16(in_per_group)
                  : std::max(round16(g) * out_per_group * in_per_group, g * round16(out_per_group) * round16(in_per_group));
  return floats * taps * sizeof(float);
}

inline std::string window_text(window w) {
  return w.height == w.width ? std::to_string(w.height)
                             : "{" + std::to_string(w.height) + ", " + std::to_string(w.width) + "}";
}
// ", 2, same, ..." after the kernel: what differs from the defaults.
inline std::string tail_text(window strides, padding p, bool options) {
  std::string out;
  if (strides.height != 1 || strides.width != 1 || p == padding::same) out += ", " + window_text(strides);
  if (p == padding::same) out += ", same";
  if (options) out += ", ...";
  return out;
}

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
};

// The fixed addresses a convolution runs on.
struct buffers {
  const float* in = nullptr;    // (B, H, W, C)
  float* out = nullptr;         // (B, Hout, Wout, O)
  const float* d_out = nullptr;
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
#if TYPEFLOW_HAS_ONEDNN_CPP
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
    src_md_ = md({n, c, h, w}, dt::f32, tag::nhwc);
    dst_md_ = md({n, o, oh, ow}, dt::f32, tag::nhwc);
    kernel_md_ = arena_kernel_desc(p);
    bias_md_ = p.with_bias ? md({o}, dt::f32, tag::x) : md();
    const md weights_any(kernel_md_.dims(), dt::f32, tag::any);
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
            dnnl::convolution_backward_data::desc(direct, src_md_, weights_any, dst_md_, strides, dilates, pad_l, pad_r),
            user_scratchpad(), ctx.engine, forward_pd_);
      weights_pd_ = dnnl::convolution_backward_weights::primitive_desc(
          p.with_bias ? dnnl::convolution_backward_weights::desc(direct, src_md_, weights_any, bias_md_, dst_md_,
                                                                 strides, dilates, pad_l, pad_r)
                      : dnnl::convolution_backward_weights::desc(direct, src_md_, weights_any, dst_md_, strides,
                                                                 dilates, pad_l, pad_r),
          user_scratchpad(), ctx.engine, forward_pd_);
    } catch (const dnnl::error& e) {
      throw std::runtime_error("typeflow: " + std::string(p.layer) + ": oneDNN has no convolution for input (" +
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

  void bind(const buffers& b, std::byte* scratchpad) {
    auto& engine = ctx_->engine;
    auto memory = [&](const md& desc, const void* address) {
      return dnnl::memory(desc, engine, const_cast<void*>(address));
    };
    src_ = memory(src_md_, b.in);
    dst_ = memory(dst_md_, b.out);
    diff_dst_ = memory(dst_md_, b.d_out);
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
      diff_src_ = memory(src_md_, b.d_in);
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
    execute(*ctx_, forward_, forward_args_, "forward");
  }

  // Writes the kernel and bias gradients and, when bound, d_in.
  void backward() const {
    execute(*ctx_, weights_, weights_args_, "backward-weights");
    from_gradient_.run(*ctx_);
    if (data_args_.count == 0) return;
    if (own_data_weights_) to_data_.run(*ctx_);
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
      case epilogue::none: break;
    }
    return dnnl::algorithm::undef;
  }

  backend::cpu::context* ctx_ = nullptr;
  problem p_{};
  md src_md_, dst_md_, kernel_md_, bias_md_;
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
#else
// CUDA translation units (see backend/cpu/context.hpp): the interface only.
class primitives {
 public:
  primitives() = default;
  primitives(backend::cpu::context&, const problem&) {}
  std::size_t scratchpad_bytes() const { return 0; }
  std::string implementations() const { return "none (CUDA translation unit)"; }
  void bind(const buffers&, std::byte*) {}
  void forward() const {}
  void backward() const {}
};
#endif

// The executor both layers share; Layer is the bound layer.
template <class Layer, int Batch>
class executor {
 public:
  explicit executor(const layer_io& io) : io_(io), conv_(*io.context, Layer::problem_for(Batch, io.d_in != nullptr)) {}

  std::size_t scratchpad_bytes() const { return conv_.scratchpad_bytes(); }
  std::string implementations() const { return conv_.implementations(); }

  void bind(std::byte* scratchpad) {
    using params = typename Layer::params;
    buffers b;
    b.in = io_.in;
    b.out = io_.out;
    b.d_out = io_.d_out;
    b.d_in = io_.d_in;
    b.kernel = io_.params + params::template offset<0>;
    b.d_kernel = io_.grads + params::template offset<0>;
    if constexpr (Layer::with_bias) {
      b.bias = io_.params + params::template offset<1>;
      b.d_bias = io_.grads + params::template offset<1>;
    }
    b.forward_weights = io_.workspace;
    b.data_weights = io_.scratch;
    b.weight_gradient = io_.scratch + align_up(Layer::weights_reserved);
    conv_.bind(b, scratchpad);
  }

  void forward() { conv_.forward(); }
  void backward() { conv_.backward(); }

 private:
  layer_io io_;
  primitives conv_;
};

// The facts conv2d and depthwise_conv2d share, from their geometry.
template <class Spec, class In, class Context, class Geometry, int OutChannels, int Groups, bool WithBias>
struct bound_convolution : layer_defaults {
  using input_shape = In;
  using output_shape = shape<Geometry::rows.out(), Geometry::cols.out(), OutChannels>;
  static constexpr bool with_bias = WithBias;
  static constexpr epilogue fused = fusable_epilogue<typename Context::next>;
  static constexpr std::size_t flops_per_sample = 2 * static_cast<std::size_t>(Geometry::rows.out()) *
                                                  static_cast<std::size_t>(Geometry::cols.out()) * OutChannels *
                                                  static_cast<std::size_t>(Geometry::rows.kernel) *
                                                  static_cast<std::size_t>(Geometry::cols.kernel) *
                                                  static_cast<std::size_t>(Geometry::channels / Groups);
  // The kernel in oneDNN's format: one copy kept from forward to backward,
  // and in scratch one for backward-data (when its format differs) and one
  // for the kernel gradient.
  static constexpr std::size_t weights_reserved =
      weights_bytes_bound(Groups, Geometry::channels, OutChannels, Geometry::rows.kernel, Geometry::cols.kernel);
  static constexpr std::size_t workspace_bytes_per_step = align_up(weights_reserved);
  static constexpr std::size_t scratch_bytes_per_step = 2 * align_up(weights_reserved);

  static constexpr problem problem_for(int batch, bool input_gradient) {
    problem p;
    p.layer = Spec::scope_name.data();
    p.batch = batch;
    p.height = Geometry::rows.in;
    p.width = Geometry::cols.in;
    p.channels = Geometry::channels;
    p.out_height = Geometry::rows.out();
    p.out_width = Geometry::cols.out();
    p.out_channels = OutChannels;
    p.groups = Groups;
    p.kernel_height = Geometry::rows.kernel;
    p.kernel_width = Geometry::cols.kernel;
    p.stride_height = Geometry::rows.stride;
    p.stride_width = Geometry::cols.stride;
    p.dilation_height = Geometry::rows.dilation;
    p.dilation_width = Geometry::cols.dilation;
    p.pad_top = Geometry::rows.pad_before();
    p.pad_bottom = Geometry::rows.pad_after();
    p.pad_left = Geometry::cols.pad_before();
    p.pad_right = Geometry::cols.pad_after();
    p.with_bias = WithBias;
    p.after = fused;
    p.input_gradient = input_gradient;
    p.weights_reserved = weights_reserved;
    return p;
  }
};

template <class Option>
inline constexpr bool is_conv2d_option =
    is_known_option<Option> || option_traits<Option>::dilations == 1 || option_traits<Option>::bias_flags == 1;

}  // namespace detail::convolution

template <int Filters, window Kernel, window Strides = 1, padding Padding = padding::valid, class... Options>
struct conv2d {
  static constexpr std::string_view scope_name = "conv2d";
  // "conv2d<32, 3>", "conv2d<64, {3, 5}, 2, same, ...>".
  static std::string type_name() {
    return "conv2d<" + std::to_string(Filters) + ", " + detail::convolution::window_text(Kernel) +
           detail::convolution::tail_text(Strides, Padding, sizeof...(Options) > 0) + ">";
  }

  template <class In, class Context>
  struct bind;
};

template <int Filters, window Kernel, window Strides, padding Padding, class... Options>
template <class In, class Context>
struct conv2d<Filters, Kernel, Strides, Padding, Options...>::bind
    : detail::convolution::bound_convolution<
          conv2d, In, Context,
          detail::convolution::geometry<In, Kernel, Strides, Padding, detail::convolution::dilation_of<Options...>()>,
          (Filters > 0 ? Filters : 1), 1, detail::convolution::bias_of<Options...>()> {
  using where = layer_at<Context::position, conv2d>;
  using geometry =
      detail::convolution::geometry<In, Kernel, Strides, Padding, detail::convolution::dilation_of<Options...>()>;
  static_assert(layer_check<where, given<In>, geometry::rank_ok>::passed,
                "conv2d: the input must be (height, width, channels) per sample, channels last");
  static_assert(layer_check<where, given<In>, (Filters > 0)>::passed,
                "conv2d<Filters, Kernel>: Filters, the number of output channels, must be positive");
  static_assert(layer_check<where, given<In>, geometry::kernel_ok>::passed,
                "conv2d<Filters, Kernel>: the kernel's height and width must be positive");
  static_assert(layer_check<where, given<In>, geometry::strides_ok>::passed,
                "conv2d<Filters, Kernel, Strides>: the strides must be positive");
  static_assert(layer_check<where, given<In>, geometry::dilation_ok>::passed,
                "conv2d: dilation<D>: the dilation rate must be positive");
  static_assert(layer_check<where, given<In>, (geometry::nonempty || !geometry::rank_ok)>::passed,
                "conv2d: the (dilated) kernel is larger than the input, so padding::valid leaves no output; "
                "use a smaller kernel or padding::same");
  static_assert(layer_check<where, given<In>, (detail::convolution::is_conv2d_option<Options> && ...)>::passed,
                "conv2d<Filters, Kernel, Strides, Padding, Options...>: each option must be dilation<>, "
                "use_bias<>, kernel_initializer<>, bias_initializer<>, kernel_regularizer<> or bias_regularizer<>");
  static_assert(layer_check<where, given<In>,
                            (0 + ... + detail::convolution::option_traits<Options>::dilations) <= 1 &&
                                (0 + ... + detail::convolution::option_traits<Options>::bias_flags) <= 1 &&
                                option_count<kernel_initializer, Options...> <= 1 &&
                                option_count<bias_initializer, Options...> <= 1 &&
                                option_count<kernel_regularizer, Options...> <= 1 &&
                                option_count<bias_regularizer, Options...> <= 1>::passed,
                "conv2d<Filters, Kernel, Strides, Padding, Options...>: each kind of option may be given once");
  static_assert(layer_check<where, given<In, typename Context::precision::input>,
                            !std::is_same_v<typename Context::precision::input, int32>>::passed,
                "conv2d: the input holds int32 token ids; convolutions read float features");

  static constexpr int filters = Filters > 0 ? Filters : 1;  // keeps one error per mistake
  using kernel_param =
      param<"kernel", shape<geometry::rows.kernel, geometry::cols.kernel, geometry::channels, filters>,
            option_t<kernel_initializer, initializers::glorot_uniform, Options...>, param_kind::kernel,
            option_t<kernel_regularizer, regularizers::none, Options...>>;
  using bias_param = param<"bias", shape<filters>, option_t<bias_initializer, initializers::zeros, Options...>,
                           param_kind::bias, option_t<bias_regularizer, regularizers::none, Options...>>;
  using params = std::conditional_t<detail::convolution::bias_of<Options...>(), param_list<kernel_param, bias_param>,
                                    param_list<kernel_param>>;

  static constexpr detail::convolution::problem problem_for(int batch, bool input_gradient) {
    auto p = bind::bound_convolution::problem_for(batch, input_gradient);
    p.kernel_row_stride = static_cast<int>(kernel_param::row_stride);
    return p;
  }

  template <int Batch>
  using executor = detail::convolution::executor<bind, Batch>;
};

template <window Kernel, window Strides = 1, padding Padding = padding::valid, class... Options>
struct depthwise_conv2d {
  static constexpr std::string_view scope_name = "depthwise_conv2d";
  // "depthwise_conv2d<3>", "depthwise_conv2d<{3, 5}, 2, same, ...>".
  static std::string type_name() {
    return "depthwise_conv2d<" + detail::convolution::window_text(Kernel) +
           detail::convolution::tail_text(Strides, Padding, sizeof...(Options) > 0) + ">";
  }

  template <class In, class Context>
  struct bind;
};

namespace detail::convolution {
template <class In, class... Options>
inline constexpr int depthwise_out_channels =
    input_dim<In>(2) * positive_or_one(multiplier_of<Options...>());
}  // namespace detail::convolution

template <window Kernel, window Strides, padding Padding, class... Options>
template <class In, class Context>
struct depthwise_conv2d<Kernel, Strides, Padding, Options...>::bind
    : detail::convolution::bound_convolution<
          depthwise_conv2d, In, Context,
          detail::convolution::geometry<In, Kernel, Strides, Padding, detail::convolution::dilation_of<Options...>()>,
          detail::convolution::depthwise_out_channels<In, Options...>, detail::convolution::input_dim<In>(2),
          detail::convolution::bias_of<Options...>()> {
  using where = layer_at<Context::position, depthwise_conv2d>;
  using geometry =
      detail::convolution::geometry<In, Kernel, Strides, Padding, detail::convolution::dilation_of<Options...>()>;
  static constexpr int requested_multiplier = detail::convolution::multiplier_of<Options...>();
  static_assert(layer_check<where, given<In>, geometry::rank_ok>::passed,
                "depthwise_conv2d: the input must be (height, width, channels) per sample, channels last");
  static_assert(layer_check<where, given<In>, (requested_multiplier > 0)>::passed,
                "depthwise_conv2d: depth_multiplier<M>: M, the output channels per input channel, must be positive");
  static_assert(layer_check<where, given<In>, geometry::kernel_ok>::passed,
                "depthwise_conv2d<Kernel>: the kernel's height and width must be positive");
  static_assert(layer_check<where, given<In>, geometry::strides_ok>::passed,
                "depthwise_conv2d<Kernel, Strides>: the strides must be positive");
  static_assert(layer_check<where, given<In>, geometry::dilation_ok>::passed,
                "depthwise_conv2d: dilation<D>: the dilation rate must be positive");
  static_assert(layer_check<where, given<In>, (geometry::nonempty || !geometry::rank_ok)>::passed,
                "depthwise_conv2d: the (dilated) kernel is larger than the input, so padding::valid leaves no "
                "output; use a smaller kernel or padding::same");
  static_assert(layer_check<where, given<In>,
                            ((detail::convolution::is_conv2d_option<Options> ||
                              detail::convolution::option_traits<Options>::multipliers == 1) &&
                             ...)>::passed,
                "depthwise_conv2d<Kernel, Strides, Padding, Options...>: each option must be depth_multiplier<>, "
                "dilation<>, use_bias<>, kernel_initializer<>, bias_initializer<>, kernel_regularizer<> or "
                "bias_regularizer<>");
  static_assert(layer_check<where, given<In>,
                            (0 + ... + detail::convolution::option_traits<Options>::dilations) <= 1 &&
                                (0 + ... + detail::convolution::option_traits<Options>::bias_flags) <= 1 &&
                                (0 + ... + detail::convolution::option_traits<Options>::multipliers) <= 1 &&
                                option_count<kernel_initializer, Options...> <= 1 &&
                                option_count<bias_initializer, Options...> <= 1 &&
                                option_count<kernel_regularizer, Options...> <= 1 &&
                                option_count<bias_regularizer, Options...> <= 1>::passed,
                "depthwise_conv2d<Kernel, Strides, Padding, Options...>: each kind of option may be given once");
  static_assert(layer_check<where, given<In, typename Context::precision::input>,
                            !std::is_same_v<typename Context::precision::input, int32>>::passed,
                "depthwise_conv2d: the input holds int32 token ids; convolutions read float features");

  static constexpr int multiplier = requested_multiplier > 0 ? requested_multiplier : 1;
  using kernel_param =
      param<"depthwise_kernel", shape<geometry::rows.kernel, geometry::cols.kernel, geometry::channels, multiplier>,
            option_t<kernel_initializer, initializers::glorot_uniform, Options...>, param_kind::kernel,
            option_t<kernel_regularizer, regularizers::none, Options...>>;
  using bias_param =
      param<"bias", shape<geometry::channels * multiplier>, option_t<bias_initializer, initializers::zeros, Options...>,
            param_kind::bias, option_t<bias_regularizer, regularizers::none, Options...>>;
  using params = std::conditional_t<detail::convolution::bias_of<Options...>(), param_list<kernel_param, bias_param>,
                                    param_list<kernel_param>>;

  static constexpr detail::convolution::problem problem_for(int batch, bool input_gradient) {
    auto p = bind::bound_convolution::problem_for(batch, input_gradient);
    p.kernel_row_stride = static_cast<int>(kernel_param::row_stride);
    return p;
  }

  template <int Batch>
  using executor = detail::convolution::executor<bind, Batch>;
};

// An activation after a convolution runs as its oneDNN post-op.
template <int F, window K, window S, padding P, class... O>
inline constexpr bool fuses_epilogue<conv2d<F, K, S, P, O...>> = true;
template <window K, window S, padding P, class... O>
inline constexpr bool fuses_epilogue<depthwise_conv2d<K, S, P, O...>> = true;

}  // namespace typeflow


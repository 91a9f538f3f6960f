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
// bias_initializer<I>, kernel_regularizer<R>, bias_regularizer<R>, a dtype
// (float32, float16, bfloat16: the dtype it computes in under a mixed
// policy, as Keras's dtype="float32" on an output layer), and for
// depthwise_conv2d depth_multiplier<M>; the kernel options apply to its
// depthwise_kernel (Keras's depthwise_initializer, depthwise_regularizer).
// e.g. conv2d<64, window{3, 5}, 2, padding::same, dilation<2>, use_bias<false>>.
//
// When a relu, tanh or sigmoid follows, it runs inside the convolution as
// its epilogue and the activation layer only applies its derivative in
// backward, as after a dense.
//
// The kernel is stored in Keras's layout with padded rows (see
// padded_row_length). Under a mixed policy they compute in its compute dtype
// (16-bit products, float32 accumulation) and read and write float32.
// The executors: backend/cpu/conv2d.hpp (oneDNN).
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#include "typeflow/core/dtype.hpp"
#include "typeflow/core/shape.hpp"
#include "typeflow/initializers/initializers.hpp"
#include "typeflow/layers/activation_traits.hpp"
#include "typeflow/layers/options.hpp"
#include "typeflow/layers/window.hpp"
#include "typeflow/contract/layer.hpp"
#include "typeflow/precision/policy.hpp"

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
// group (gOIhw8i8o). The CPU executor checks the formats it gets against
// this (backend/cpu/conv2d.hpp).
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

// The facts conv2d and depthwise_conv2d share, from their geometry.
template <class Spec, class In, class Context, class Geometry, int OutChannels, int Groups, bool WithBias,
          class ComputeDtype>
struct bound_convolution : layer_defaults {
  using input_shape = In;
  using output_shape = shape<Geometry::rows.out(), Geometry::cols.out(), OutChannels>;
  static constexpr int out_channels = OutChannels;
  static constexpr int groups = Groups;  // depthwise: one per input channel
  static constexpr bool with_bias = WithBias;
  static constexpr epilogue fused = epilogue_between<Spec, typename Context::next, Context::gpu>;
  static constexpr std::size_t flops_per_sample = 2 * static_cast<std::size_t>(Geometry::rows.out()) *
                                                  static_cast<std::size_t>(Geometry::cols.out()) * OutChannels *
                                                  static_cast<std::size_t>(Geometry::rows.kernel) *
                                                  static_cast<std::size_t>(Geometry::cols.kernel) *
                                                  static_cast<std::size_t>(Geometry::channels / Groups);
  // A mixed policy's convolution computes in its compute dtype (or the
  // layer's dtype option), as Keras's Conv2D does: a 16-bit product with
  // float32 accumulation. Its input and output stay float32 (the layers
  // around it, pooling and normalization, read float32).
  using compute_dtype = ComputeDtype;
  static constexpr bool low_precision = precision::is_16bit_v<compute_dtype>;
  // The CPU's native bf16 convolutions (chosen at run time): forward
  // converts the input to bf16 and keeps it for backward-weights.
  static constexpr bool native_bf16_possible = std::is_same_v<compute_dtype, bfloat16>;
  // The CPU's kernel in oneDNN's format (float32, or bf16 on the native
  // path): one copy kept from forward to backward, and in scratch one for
  // backward-data (when its format differs) and one for the kernel gradient
  // (backend/cpu/conv2d.hpp).
  static constexpr std::size_t weights_reserved =
      weights_bytes_bound(Groups, Geometry::channels, OutChannels, Geometry::rows.kernel, Geometry::cols.kernel);
  static constexpr std::size_t workspace_bytes_per_sample = native_bf16_possible ? In::size * std::size_t{2} : 0;
  static constexpr std::size_t workspace_bytes_per_step =
      align_up(weights_reserved) + (native_bf16_possible ? arena_alignment : 0);
  // In 16 bits, scratch also holds the input rounded (emulated) or d_out in
  // bf16 (native), then the bias rounded.
  static constexpr std::size_t scratch_bytes_per_sample =
      low_precision ? std::max(In::size * sizeof(float), native_bf16_possible ? output_shape::size * std::size_t{2} : 0)
                    : 0;
  static constexpr std::size_t scratch_bytes_per_step =
      2 * align_up(weights_reserved) + (low_precision ? align_up(OutChannels * sizeof(float)) + arena_alignment : 0);
};

template <class Option>
inline constexpr bool is_conv2d_option = is_known_option<Option> || is_dtype_option<Option> ||
                                         option_traits<Option>::dilations == 1 || option_traits<Option>::bias_flags == 1;

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
          (Filters > 0 ? Filters : 1), 1, detail::convolution::bias_of<Options...>(),
          dtype_option_t<typename Context::precision::compute, Options...>> {
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
                "use_bias<>, kernel_initializer<>, bias_initializer<>, kernel_regularizer<>, bias_regularizer<> "
                "or a dtype (float32, float16, bfloat16)");
  static_assert(layer_check<where, given<In>,
                            (0 + ... + detail::convolution::option_traits<Options>::dilations) <= 1 &&
                                (0 + ... + detail::convolution::option_traits<Options>::bias_flags) <= 1 &&
                                option_count<kernel_initializer, Options...> <= 1 &&
                                option_count<bias_initializer, Options...> <= 1 &&
                                option_count<kernel_regularizer, Options...> <= 1 &&
                                option_count<bias_regularizer, Options...> <= 1 &&
                                dtype_option_count<Options...> <= 1>::passed,
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
          detail::convolution::bias_of<Options...>(),
          dtype_option_t<typename Context::precision::compute, Options...>> {
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
                "dilation<>, use_bias<>, kernel_initializer<>, bias_initializer<>, kernel_regularizer<>, "
                "bias_regularizer<> or a dtype (float32, float16, bfloat16)");
  static_assert(layer_check<where, given<In>,
                            (0 + ... + detail::convolution::option_traits<Options>::dilations) <= 1 &&
                                (0 + ... + detail::convolution::option_traits<Options>::bias_flags) <= 1 &&
                                (0 + ... + detail::convolution::option_traits<Options>::multipliers) <= 1 &&
                                option_count<kernel_initializer, Options...> <= 1 &&
                                option_count<bias_initializer, Options...> <= 1 &&
                                option_count<kernel_regularizer, Options...> <= 1 &&
                                option_count<bias_regularizer, Options...> <= 1 &&
                                dtype_option_count<Options...> <= 1>::passed,
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
};

// An activation after a convolution runs as its epilogue.
template <int F, window K, window S, padding P, class... O>
inline constexpr bool fuses_epilogue<conv2d<F, K, S, P, O...>> = true;
template <window K, window S, padding P, class... O>
inline constexpr bool fuses_epilogue<depthwise_conv2d<K, S, P, O...>> = true;

}  // namespace typeflow


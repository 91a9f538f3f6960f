// 2-D pooling over channels-last samples, with Keras's semantics.
//
//   max_pooling2d<Pool = 2, Strides = Pool, Padding = valid>      Keras MaxPooling2D
//   average_pooling2d<Pool = 2, Strides = Pool, Padding = valid>  Keras AveragePooling2D
//       input (B, H, W, C) -> output (B, Hout, Wout, C), no parameters
//   global_average_pooling2d                                      Keras GlobalAveragePooling2D
//       input (B, H, W, C) -> output (B, C)
//
// Pool and Strides are windows (window.hpp): max_pooling2d<3, 2> is a 3 x 3
// window moved 2 rows and 2 columns at a time; max_pooling2d<{2, 3}> is 2 x 3.
// Output lengths, per axis, are Keras's:
//   valid: out = floor((in - pool) / stride) + 1   (every window wholly inside)
//   same:  out = ceil(in / stride); the input is padded by
//          max((out - 1) * stride + pool - in, 0), the smaller half on the
//          top/left, the rest on the bottom/right.
// Padding never contributes: max pooling pads with -infinity (it never wins),
// and average pooling divides by the number of in-bounds elements of each
// window (TensorFlow's rule; oneDNN's pooling_avg_exclude_padding).
//
// Max pooling keeps the argmax of every output element (its position in the
// window, row-major; one byte when the window has at most 256 elements) in its
// workspace from forward to backward, so backward sends each gradient to
// exactly one input element; of equal elements the first in window order
// wins, as in TensorFlow. Outside training (evaluate, predict) forward skips
// the argmax.
//
// The executors: backend/cpu/pooling.hpp, backend/cuda/layers.hpp (kernels:
// backend/cuda/pooling.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "typeflow/core/pool_windows.hpp"
#include "typeflow/core/shape.hpp"
#include "typeflow/layers/window.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {

namespace detail {

// Axis `axis` of a rank-3 shape; 1 for any other rank, so that a failed rank
// check is the only error.
template <class In>
constexpr int rank3_dim(std::size_t axis) {
  if constexpr (In::rank == 3) return In::dims[axis];
  else return 1;
}

constexpr int at_least_one(int n) { return n > 0 ? n : 1; }

// Keras's output length along one axis (0: the window does not fit).
constexpr int pooled_length(int in, int pool, int stride, padding mode) {
  if (mode == padding::same) return (in + stride - 1) / stride;
  return in >= pool ? (in - pool) / stride + 1 : 0;
}

// Padding before the first element (top or left): the smaller half.
constexpr int padding_before(int in, int out, int pool, int stride, padding mode) {
  if (mode == padding::valid) return 0;
  const int total = (out - 1) * stride + pool - in;
  return total > 0 ? total / 2 : 0;
}

inline std::string window_string(window w) {
  if (w.height == w.width) return std::to_string(w.height);
  return "{" + std::to_string(w.height) + ", " + std::to_string(w.width) + "}";
}

// "name<2>", "name<3, 2>", "name<{2, 3}, {2, 3}, same>": defaults left out.
inline std::string pooling_name(const char* name, window pool, window strides, padding mode) {
  std::string text = std::string(name) + "<" + window_string(pool);
  const bool default_strides = strides.height == pool.height && strides.width == pool.width;
  if (!default_strides || mode == padding::same) text += ", " + window_string(strides);
  if (mode == padding::same) text += ", same";
  return text + ">";
}

// Everything about a window sliding over (H, W, C), with the user's numbers
// checked (the *_ok facts) and clamped to 1, so one mistake gives one error.
template <class In, window Pool, window Strides, padding Padding>
struct pool_geometry {
  static constexpr bool rank_ok = In::rank == 3;
  static constexpr bool pool_ok = Pool.height > 0 && Pool.width > 0;
  static constexpr bool strides_ok = Strides.height > 0 && Strides.width > 0;

  static constexpr int in_h = rank3_dim<In>(0);
  static constexpr int in_w = rank3_dim<In>(1);
  static constexpr int channels = rank3_dim<In>(2);
  static constexpr int pool_h = at_least_one(Pool.height);
  static constexpr int pool_w = at_least_one(Pool.width);
  static constexpr int stride_h = at_least_one(Strides.height);
  static constexpr int stride_w = at_least_one(Strides.width);

  static constexpr int raw_out_h = pooled_length(in_h, pool_h, stride_h, Padding);
  static constexpr int raw_out_w = pooled_length(in_w, pool_w, stride_w, Padding);
  // An empty output is only reported for a well-formed input.
  static constexpr bool fits = !rank_ok || (raw_out_h > 0 && raw_out_w > 0);
  static constexpr int out_h = at_least_one(raw_out_h);
  static constexpr int out_w = at_least_one(raw_out_w);
  static constexpr int top = padding_before(in_h, out_h, pool_h, stride_h, Padding);
  static constexpr int left = padding_before(in_w, out_w, pool_w, stride_w, Padding);

  static constexpr std::size_t in_size = static_cast<std::size_t>(in_h) * in_w * channels;
  static constexpr std::size_t out_pixels = static_cast<std::size_t>(out_h) * out_w;
  static constexpr std::size_t out_size = out_pixels * channels;
  static constexpr int window_size = pool_h * pool_w;

  using output_shape = shape<out_h, out_w, channels>;

  // The windows' arithmetic, shared with the GPU's kernels (core/pool_windows.hpp).
  static constexpr pool_windows::window_2d windows{in_h,     in_w,     channels, pool_h, pool_w, stride_h,
                                                   stride_w, top,      left,     out_h,  out_w};
  // The in-bounds part of output row oh's windows: rows [h0 + k0, h0 + k1).
  using span = pool_windows::span;
  static constexpr span rows_of(int oh) { return windows.rows_of(oh); }
  static constexpr span cols_of(int ow) { return windows.cols_of(ow); }
  // The output rows whose windows cover input row h: [first, last].
  using range = pool_windows::range;
  static constexpr range covering_rows(int h) { return windows.covering_rows(h); }
  static constexpr range covering_cols(int w) { return windows.covering_cols(w); }
};

// The argmax's type: a position in the window, one byte when it fits.
template <int WindowSize>
using argmax_index = std::conditional_t<(WindowSize <= 256), std::uint8_t,
                                        std::conditional_t<(WindowSize <= 65536), std::uint16_t, std::int32_t>>;

}  // namespace detail

template <window Pool = 2, window Strides = Pool, padding Padding = padding::valid>
struct max_pooling2d {
  static std::string type_name() { return detail::pooling_name("max_pooling2d", Pool, Strides, Padding); }

  template <class In, class Context>
  struct bind : layer_defaults {
    using geometry = detail::pool_geometry<In, Pool, Strides, Padding>;
    static_assert(layer_check<layer_at<Context::position, max_pooling2d>, given<In>, geometry::rank_ok>::passed,
                  "max_pooling2d: the input must be (height, width, channels) per sample, channels last");
    static_assert(layer_check<layer_at<Context::position, max_pooling2d>, given<In>, geometry::pool_ok>::passed,
                  "max_pooling2d<Pool, Strides, Padding>: the pool size must be positive in both directions");
    static_assert(layer_check<layer_at<Context::position, max_pooling2d>, given<In>, geometry::strides_ok>::passed,
                  "max_pooling2d<Pool, Strides, Padding>: the strides must be positive in both directions");
    static_assert(layer_check<layer_at<Context::position, max_pooling2d>, given<In>, geometry::fits>::passed,
                  "max_pooling2d: with valid padding the pool window must fit in the input (pool <= height and "
                  "pool <= width), or the output would be empty; use a smaller pool or padding::same");

    using input_shape = In;
    using output_shape = typename geometry::output_shape;
    using index_type = detail::argmax_index<geometry::window_size>;
    // One comparison per window element read.
    static constexpr std::size_t flops_per_sample = geometry::out_size * geometry::window_size;
    static constexpr std::size_t workspace_bytes_per_sample = geometry::out_size * sizeof(index_type);
  };
};

template <window Pool = 2, window Strides = Pool, padding Padding = padding::valid>
struct average_pooling2d {
  static std::string type_name() { return detail::pooling_name("average_pooling2d", Pool, Strides, Padding); }

  template <class In, class Context>
  struct bind : layer_defaults {
    using geometry = detail::pool_geometry<In, Pool, Strides, Padding>;
    static_assert(layer_check<layer_at<Context::position, average_pooling2d>, given<In>, geometry::rank_ok>::passed,
                  "average_pooling2d: the input must be (height, width, channels) per sample, channels last");
    static_assert(layer_check<layer_at<Context::position, average_pooling2d>, given<In>, geometry::pool_ok>::passed,
                  "average_pooling2d<Pool, Strides, Padding>: the pool size must be positive in both directions");
    static_assert(
        layer_check<layer_at<Context::position, average_pooling2d>, given<In>, geometry::strides_ok>::passed,
        "average_pooling2d<Pool, Strides, Padding>: the strides must be positive in both directions");
    static_assert(layer_check<layer_at<Context::position, average_pooling2d>, given<In>, geometry::fits>::passed,
                  "average_pooling2d: with valid padding the pool window must fit in the input (pool <= height and "
                  "pool <= width), or the output would be empty; use a smaller pool or padding::same");

    using input_shape = In;
    using output_shape = typename geometry::output_shape;
    // One addition per window element read, one scaling per output.
    static constexpr std::size_t flops_per_sample = geometry::out_size * (geometry::window_size + 1);
  };
};

// global_average_pooling2d: the mean over height and width of each channel.
//   input (B, H, W, C) -> output (B, C)
struct global_average_pooling2d {
  static std::string type_name() { return "global_average_pooling2d"; }

  template <class In, class Context>
  struct bind : layer_defaults {
    static_assert(layer_check<layer_at<Context::position, global_average_pooling2d>, given<In>, In::rank == 3>::passed,
                  "global_average_pooling2d: the input must be (height, width, channels) per sample, channels last");
    static constexpr int channels = detail::rank3_dim<In>(2);
    static constexpr std::ptrdiff_t pixels = static_cast<std::ptrdiff_t>(detail::rank3_dim<In>(0)) *
                                             detail::rank3_dim<In>(1);
    using input_shape = In;
    using output_shape = shape<channels>;
    static constexpr std::size_t flops_per_sample = static_cast<std::size_t>(pixels) * channels + channels;
  };
};

}  // namespace typeflow

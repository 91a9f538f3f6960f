// conv2d and depthwise_conv2d's GPU path (backend/cuda/conv2d_executor.hpp,
// kernels in backend/cuda/kernels/convolution.cuh) replayed on the CPU: the
// kernels' threads through the arithmetic they run (core/conv_windows.hpp),
// conv2d's products as float32-accumulated loops over the operands the GPU
// gives cuBLASLt, against the CPU layers (oneDNN) on the same inputs: the
// output, d_x and every parameter's gradient, over paddings, strides,
// dilations, a fused relu, a depth multiplier and bfloat16. The GPU test
// (tests/cuda/conv_test.cpp) runs the kernels themselves where a device exists.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "typeflow/core/attention_rows.hpp"  // rounded<Value>
#include "typeflow/core/conv_windows.hpp"

#include "../support/bound_layer.hpp"
#include "../support/layer_harness.hpp"
#include "../support/relative_gap.hpp"

namespace tf = typeflow;
namespace cw = typeflow::conv_windows;

namespace {

template <class Spec, class In, class Next = void, class Compute = tf::float32>
using bound = tf::testing::bound_layer<
    Spec, In, tf::layer_context<1, tf::layer_norm, Next, 0, void, false, tf::layer_precision<Compute>>>;

template <class Layer>
constexpr cw::conv_window window_of() {
  using g = typename Layer::geometry;
  return {g::rows.in,       g::cols.in,       g::channels,          g::rows.kernel, g::cols.kernel,
          g::rows.stride,   g::cols.stride,   g::rows.dilation,     g::cols.dilation, g::rows.pad_before(),
          g::cols.pad_before(), g::rows.out(), g::cols.out()};
}

template <class Value>
float rounded(float x) {
  return tf::attention_rows::rounded<Value>(x);
}

struct results {
  std::vector<float> out, d_x, d_kernel, d_bias;
};

using tf::testing::relative_gap;

// The CPU layer's results, the parameters' gradients in their logical layout.
template <class H>
results cpu_results(const H& h) {
  results r{h.out, h.d_in, {}, {}};
  for (std::size_t e = 0; e < H::template size_of<0>; ++e) r.d_kernel.push_back(h.template grad<0>(e));
  if constexpr (H::params::count > 1)
    for (std::size_t e = 0; e < H::template size_of<1>; ++e) r.d_bias.push_back(h.template grad<1>(e));
  return r;
}

template <class Layer, class H>
void relu_if_fused(std::vector<float>& out) {
  if constexpr (Layer::fused == tf::epilogue::relu)
    for (float& v : out) v = std::max(v, 0.f);
}

// conv2d_executor's forward and backward on h's inputs: the patches a
// thread per element, the products in k's order, d_x a thread per element.
template <class Layer, int Batch, class Value, class H>
results replay_conv2d(H& h) {
  constexpr cw::conv_window w = window_of<Layer>();
  constexpr int rows = Batch * w.out_h * w.out_w, patch = w.patch_size(), filters = Layer::out_channels;
  std::vector<float> kernel(H::template size_of<0>), bias(filters, 0.f);
  for (std::size_t e = 0; e < kernel.size(); ++e) kernel[e] = rounded<Value>(h.template param<0>(e));
  if constexpr (Layer::with_bias)
    for (int f = 0; f < filters; ++f) bias[f] = rounded<Value>(h.template param<1>(f));
  std::vector<float> patches(static_cast<std::size_t>(rows) * patch);
  for (std::size_t e = 0; e < patches.size(); ++e) {  // patches_kernel
    const std::size_t row = e / patch, sample = row / w.out_positions(), position = row % w.out_positions();
    const int column = static_cast<int>(e % patch), c = column % w.channels, tap = column / w.channels;
    patches[e] = rounded<Value>(cw::patch_value(h.in.data() + sample * w.in_size(), w,
                                                static_cast<int>(position / w.out_w), static_cast<int>(position % w.out_w),
                                                tap / w.kernel_w, tap % w.kernel_w, c));
  }
  results r;
  r.out.resize(static_cast<std::size_t>(rows) * filters);
  for (int i = 0; i < rows; ++i)
    for (int f = 0; f < filters; ++f) {
      float s = 0.f;
      for (int k = 0; k < patch; ++k) s += patches[static_cast<std::size_t>(i) * patch + k] * kernel[k * filters + f];
      r.out[static_cast<std::size_t>(i) * filters + f] = rounded<Value>(s + bias[f]);
    }
  relu_if_fused<Layer, H>(r.out);
  std::vector<float> d_out(h.d_out.size());
  for (std::size_t e = 0; e < d_out.size(); ++e) d_out[e] = rounded<Value>(h.d_out[e]);
  r.d_kernel.assign(static_cast<std::size_t>(patch) * filters, 0.f);
  for (int k = 0; k < patch; ++k)
    for (int f = 0; f < filters; ++f) {
      float s = 0.f;
      for (int i = 0; i < rows; ++i) s += patches[static_cast<std::size_t>(i) * patch + k] * d_out[static_cast<std::size_t>(i) * filters + f];
      r.d_kernel[static_cast<std::size_t>(k) * filters + f] = s;
    }
  if constexpr (Layer::with_bias) {
    r.d_bias.assign(filters, 0.f);
    for (int i = 0; i < rows; ++i)
      for (int f = 0; f < filters; ++f) r.d_bias[f] += d_out[static_cast<std::size_t>(i) * filters + f];
  }
  std::vector<float> d_patches(patches.size());
  for (int i = 0; i < rows; ++i)
    for (int k = 0; k < patch; ++k) {
      float s = 0.f;
      for (int f = 0; f < filters; ++f) s += d_out[static_cast<std::size_t>(i) * filters + f] * kernel[k * filters + f];
      d_patches[static_cast<std::size_t>(i) * patch + k] = s;
    }
  r.d_x.resize(h.in.size());
  for (std::size_t e = 0; e < r.d_x.size(); ++e) {  // patch_gradient_kernel
    const std::size_t sample = e / w.in_size(), inside = e % w.in_size(), pixel = inside / w.channels;
    r.d_x[e] = cw::patch_gradient(d_patches.data() + sample * w.out_positions() * patch, patch, w,
                                  static_cast<int>(pixel / w.in_w), static_cast<int>(pixel % w.in_w),
                                  static_cast<int>(inside % w.channels));
  }
  return r;
}

// depthwise_executor's kernels, a thread per element of each result.
template <class Layer, int Batch, class Value, class H>
results replay_depthwise(H& h) {
  constexpr cw::conv_window w = window_of<Layer>();
  constexpr int out_channels = Layer::out_channels, multiplier = out_channels / w.channels;
  std::vector<float> kernel(H::template size_of<0>), x(h.in.size()), d_out(h.d_out.size());
  for (std::size_t e = 0; e < kernel.size(); ++e) kernel[e] = rounded<Value>(h.template param<0>(e));
  for (std::size_t e = 0; e < x.size(); ++e) x[e] = rounded<Value>(h.in[e]);
  for (std::size_t e = 0; e < d_out.size(); ++e) d_out[e] = rounded<Value>(h.d_out[e]);
  results r;
  r.out.resize(d_out.size());
  for (std::size_t e = 0; e < r.out.size(); ++e) {
    const std::size_t row = e / out_channels, sample = row / w.out_positions(), position = row % w.out_positions();
    const int channel = static_cast<int>(e % out_channels);
    float s = cw::depthwise_output(x.data() + sample * w.in_size(), kernel.data(), multiplier, w,
                                   static_cast<int>(position / w.out_w), static_cast<int>(position % w.out_w),
                                   channel / multiplier, channel % multiplier);
    if constexpr (Layer::with_bias) s += rounded<Value>(h.template param<1>(channel));
    r.out[e] = rounded<Value>(s);
  }
  relu_if_fused<Layer, H>(r.out);
  r.d_kernel.resize(kernel.size());
  for (std::size_t e = 0; e < kernel.size(); ++e) {
    const int m = static_cast<int>(e % multiplier), row = static_cast<int>(e / multiplier);
    const int c = row % w.channels, tap = row / w.channels;
    r.d_kernel[e] = cw::depthwise_kernel_gradient(x.data(), d_out.data(), Batch, multiplier, w, tap / w.kernel_w,
                                                  tap % w.kernel_w, c, m);
  }
  if constexpr (Layer::with_bias) {
    r.d_bias.assign(out_channels, 0.f);
    for (std::size_t i = 0; i < d_out.size() / out_channels; ++i)
      for (int j = 0; j < out_channels; ++j) r.d_bias[j] += d_out[i * out_channels + j];
  }
  r.d_x.resize(x.size());
  for (std::size_t e = 0; e < x.size(); ++e) {
    const std::size_t sample = e / w.in_size(), inside = e % w.in_size(), pixel = inside / w.channels;
    r.d_x[e] = cw::depthwise_input_gradient(d_out.data() + sample * w.out_positions() * out_channels, kernel.data(),
                                            multiplier, multiplier, w, static_cast<int>(pixel / w.in_w),
                                            static_cast<int>(pixel % w.in_w), static_cast<int>(inside % w.channels));
  }
  return r;
}

template <class Layer, int Batch, class Value, bool Depthwise = false>
void compare(double tolerance) {
  tf::testing::harness<Layer, Batch> h;
  h.fill_randomly(Layer::out_channels);
  h.executor.forward();
  h.executor.backward();
  const results cpu = cpu_results(h);
  results gpu;
  if constexpr (Depthwise) gpu = replay_depthwise<Layer, Batch, Value>(h);
  else gpu = replay_conv2d<Layer, Batch, Value>(h);
  CHECK(relative_gap(gpu.out, cpu.out) <= tolerance);
  CHECK(relative_gap(gpu.d_x, cpu.d_x) <= tolerance);
  CHECK(relative_gap(gpu.d_kernel, cpu.d_kernel) <= tolerance);
  CHECK(relative_gap(gpu.d_bias, cpu.d_bias) <= tolerance);
  CHECK(cpu.d_bias.size() == (Layer::with_bias ? std::size_t{Layer::out_channels} : 0));
}

using tf::padding;
using tf::window;

}  // namespace

TEST_CASE("conv2d on the GPU, replayed: valid, same with strides, dilation, an even kernel and a fused relu") {
  compare<bound<tf::conv2d<5, 3>, tf::shape<7, 6, 3>>, 2, float>(1e-6);
  compare<bound<tf::conv2d<4, window{3, 2}, 2, padding::same>, tf::shape<9, 8, 2>>, 3, float>(1e-6);
  compare<bound<tf::conv2d<3, 3, 1, padding::valid, tf::dilation<2>, tf::use_bias<false>>, tf::shape<9, 9, 2>>, 2,
          float>(1e-6);
  compare<bound<tf::conv2d<6, 4, 1, padding::same>, tf::shape<6, 7, 3>>, 2, float>(1e-6);
  compare<bound<tf::conv2d<8, 3, 2, padding::same>, tf::shape<10, 10, 4>, tf::relu>, 2, float>(1e-6);
}

TEST_CASE("depthwise_conv2d on the GPU, replayed: a depth multiplier, strides, dilation, same padding") {
  compare<bound<tf::depthwise_conv2d<3, 1, padding::same, tf::depth_multiplier<2>>, tf::shape<7, 6, 3>>, 2, float,
          true>(1e-6);
  compare<bound<tf::depthwise_conv2d<window{3, 2}, 2, padding::valid, tf::dilation<2>>, tf::shape<11, 9, 4>>, 2,
          float, true>(1e-6);
  compare<bound<tf::depthwise_conv2d<3, 1, padding::valid, tf::use_bias<false>>, tf::shape<6, 6, 5>, tf::relu>, 3,
          float, true>(1e-6);
}

// Seen here (2026-12-06): float32 within 3.1e-7 of the CPU, bfloat16 within
// 2.8e-3 (the CPU rounds its gradients to bf16 too).
TEST_CASE("conv2d and depthwise_conv2d on the GPU, replayed: bfloat16 rounds where the CPU rounds") {
  compare<bound<tf::conv2d<5, 3, 1, padding::same>, tf::shape<8, 8, 3>, void, tf::bfloat16>, 2, tf::bf16>(6e-3);
  compare<bound<tf::depthwise_conv2d<3, 1, padding::same>, tf::shape<8, 8, 3>, void, tf::bfloat16>, 2, tf::bf16,
          true>(6e-3);
}

// conv2d and depthwise_conv2d on tf::cuda: the kernels
// (backend/cuda/convolution.hpp) against their own arithmetic
// (core/conv_windows.hpp) run on the host in the same thread layout, and a
// small CNN trained on both devices from the same seed and data.
// tests/unit/conv_rows_test.cpp checks the same arithmetic against the CPU
// layers without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <typeflow/cuda.hpp>

#include "typeflow/backend/cuda/convolution.hpp"
#include "typeflow/core/conv_windows.hpp"

#include "compare_losses.hpp"
#include "device_vectors.hpp"
#include "model_reference.hpp"

namespace {

namespace cu = typeflow::backend::cuda;
namespace cw = typeflow::conv_windows;
namespace tf = typeflow;

using cuda_test::from_device;
using cuda_test::to_device;

std::vector<float> uniform(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The kernels must agree with the host to the bit: the same sums in the same order.
void check_kernels(const cw::conv_window& w, int batch, int multiplier) {
  CAPTURE(w.kernel_h);
  CAPTURE(w.stride_h);
  const int patch = w.patch_size(), out_channels = w.channels * multiplier;
  const std::size_t rows = static_cast<std::size_t>(batch) * w.out_positions();
  const auto x = uniform(batch * w.in_size(), 1), d_patches = uniform(rows * patch, 2),
             dy = uniform(rows * out_channels, 3), kernel = uniform(static_cast<std::size_t>(patch) * multiplier, 4),
             bias = uniform(out_channels, 5);
  std::vector<float> patches(rows * patch), dx(x.size()), y(rows * out_channels), depthwise_dx(x.size()),
      d_kernel(kernel.size()), d_bias(out_channels, 0.f);
  for (std::size_t e = 0; e < patches.size(); ++e) {
    const std::size_t row = e / patch, sample = row / w.out_positions(), position = row % w.out_positions();
    const int column = static_cast<int>(e % patch), tap = column / w.channels;
    patches[e] = cw::patch_value(x.data() + sample * w.in_size(), w, static_cast<int>(position / w.out_w),
                                 static_cast<int>(position % w.out_w), tap / w.kernel_w, tap % w.kernel_w,
                                 column % w.channels);
  }
  for (std::size_t e = 0; e < x.size(); ++e) {
    const std::size_t sample = e / w.in_size(), inside = e % w.in_size(), pixel = inside / w.channels;
    const int h = static_cast<int>(pixel / w.in_w), col = static_cast<int>(pixel % w.in_w);
    const int c = static_cast<int>(inside % w.channels);
    dx[e] = cw::patch_gradient(d_patches.data() + sample * w.out_positions() * patch, patch, w, h, col, c);
    depthwise_dx[e] = cw::depthwise_input_gradient(dy.data() + sample * w.out_positions() * out_channels,
                                                   kernel.data(), multiplier, multiplier, w, h, col, c);
  }
  for (std::size_t e = 0; e < y.size(); ++e) {
    const std::size_t row = e / out_channels, sample = row / w.out_positions(), position = row % w.out_positions();
    const int channel = static_cast<int>(e % out_channels);
    y[e] = cw::depthwise_output(x.data() + sample * w.in_size(), kernel.data(), multiplier, w,
                                static_cast<int>(position / w.out_w), static_cast<int>(position % w.out_w),
                                channel / multiplier, channel % multiplier) +
           bias[channel];
  }
  for (std::size_t e = 0; e < d_kernel.size(); ++e) {
    const int m = static_cast<int>(e % multiplier), row = static_cast<int>(e / multiplier);
    d_kernel[e] = cw::depthwise_kernel_gradient(x.data(), dy.data(), batch, multiplier, w,
                                                row / w.channels / w.kernel_w, row / w.channels % w.kernel_w,
                                                row % w.channels, m);
  }
  for (std::size_t r = 0; r < rows; ++r)
    for (int j = 0; j < out_channels; ++j) d_bias[j] += dy[r * out_channels + j];

  auto x_d = to_device(x), d_patches_d = to_device(d_patches), dy_d = to_device(dy), kernel_d = to_device(kernel),
       bias_d = to_device(bias);
  cu::device_buffer patches_d(patches.size() * 4), dx_d(dx.size() * 4), y_d(y.size() * 4),
      depthwise_dx_d(dx.size() * 4), d_kernel_d(d_kernel.size() * 4), d_bias_d(d_bias.size() * 4);
  cu::conv_patches(x_d.data<float>(), patches_d.data<float>(), w, batch, nullptr);
  cu::conv_patch_gradient(d_patches_d.data<float>(), dx_d.data<float>(), w, batch, nullptr);
  cu::depthwise_forward(x_d.data<float>(), kernel_d.data<float>(), multiplier, multiplier, bias_d.data<float>(),
                        y_d.data<float>(), w, batch, nullptr);
  cu::depthwise_backward(x_d.data<float>(), dy_d.data<float>(), kernel_d.data<float>(), multiplier, multiplier,
                         depthwise_dx_d.data<float>(), d_kernel_d.data<float>(), d_bias_d.data<float>(), w, batch,
                         nullptr);
  CHECK(from_device(patches_d, patches.size()) == patches);
  CHECK(from_device(dx_d, dx.size()) == dx);
  CHECK(from_device(y_d, y.size()) == y);
  CHECK(from_device(depthwise_dx_d, dx.size()) == depthwise_dx);
  CHECK(from_device(d_kernel_d, d_kernel.size()) == d_kernel);
  CHECK(from_device(d_bias_d, d_bias.size()) == d_bias);
}

}  // namespace

TEST_CASE("cuda convolution kernels: the host's replay of their threads, to the bit") {
  // in_h, in_w, C, kh, kw, sh, sw, dh, dw, top, left, out_h, out_w
  check_kernels({9, 8, 3, 3, 3, 1, 1, 1, 1, 0, 0, 7, 6}, 2, 1);   // valid 3x3
  check_kernels({9, 8, 2, 3, 2, 2, 2, 1, 1, 1, 0, 5, 4}, 3, 2);   // same, strides 2, multiplier 2
  check_kernels({11, 9, 4, 3, 3, 1, 1, 2, 2, 0, 0, 7, 5}, 2, 1);  // dilation 2
  check_kernels({6, 7, 3, 4, 4, 1, 1, 1, 1, 1, 1, 6, 7}, 1, 3);   // even kernel, same: one more after than before
}

namespace {
using namespace cuda_reference;
// make_data()'s 32 features as a (4, 8, 1) image.
using cnn = tf::sequential<tf::input<32>, tf::reshape<4, 8, 1>, tf::conv2d<8, 3, 1, tf::padding::same>, tf::relu,
                           tf::depthwise_conv2d<3, 1, tf::padding::same, tf::depth_multiplier<2>>, tf::relu,
                           tf::max_pooling2d<2>, tf::conv2d<8, tf::window{2, 3}, 1, tf::padding::valid>, tf::flatten,
                           tf::dense<10, tf::float32>>;

template <class Policy, class Device>
std::vector<double> train_cnn() {
  const toy_data d = make_data();
  tf::model<cnn, Policy, tf::single_device, Device> model(seed);
  model.compile(tf::optimizers::adam{.learning_rate = 0.01f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  auto data = tf::data::from_tensor_slices<tf::shape<32>>(d.features, d.labels) | tf::data::batch<batch>;
  std::vector<double> losses = model.fit(data, {.epochs = 3, .verbose = 0})["loss"];
  losses.push_back(model.evaluate(data).at("loss"));
  return losses;
}

template <class Policy>
void compare_cnn(double tolerance) {  // three epochs, then evaluate
  cuda_test::check_losses_agree(train_cnn<Policy, tf::cuda>(), train_cnn<Policy, tf::cpu>(), tolerance, 2);
}
}  // namespace

TEST_CASE("cuda model: a CNN of conv2d, depthwise_conv2d and pooling trains like the CPU model") {
  compare_cnn<tf::float32>(2e-3);
  compare_cnn<tf::mixed_bfloat16>(3e-2);
}

// The poolings on tf::cuda: the kernels against core/pool_windows.hpp's
// per-element functions run here on the host (the CPU layers' own results,
// tests/unit/pooling_test.cpp shows), to the bit; and small networks with
// each pooling trained on both devices in one binary.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <typeflow/cuda.hpp>

#include "compare_losses.hpp"
#include "device_vectors.hpp"
#include "model_reference.hpp"

namespace {

namespace cu = typeflow::backend::cuda;
namespace pw = typeflow::pool_windows;
using cuda_test::from_device;
using cuda_test::to_device;

}  // namespace

TEST_CASE("cuda pooling kernels: the host functions' outputs, argmax and gradients, to the bit") {
  // (in_h, in_w, C, pool_h, pool_w, stride_h, stride_w, top, left, out_h, out_w): valid 2x2; same 3x3 stride 2
  // with padding on every side; overlapping windows.
  const pw::window_2d windows[] = {{26, 26, 32, 2, 2, 2, 2, 0, 0, 13, 13},
                                   {7, 8, 5, 3, 3, 2, 2, 1, 0, 4, 4},
                                   {5, 6, 2, 2, 2, 1, 1, 0, 0, 4, 5}};
  constexpr int batch = 3;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (const pw::window_2d& w : windows) {
    std::vector<float> x(batch * w.in_size()), dy(batch * w.out_size());
    for (float& v : x) v = dist(rng);
    for (float& v : dy) v = dist(rng);
    // The host's threads.
    std::vector<float> y_max(dy.size()), y_avg(dy.size()), dx_max(x.size()), dx_avg(x.size());
    std::vector<std::uint8_t> arg(dy.size());
    for (int n = 0; n < batch; ++n)
      for (int oh = 0; oh < w.out_h; ++oh)
        for (int ow = 0; ow < w.out_w; ++ow)
          for (int c = 0; c < w.channels; ++c) {
            const std::size_t e = n * w.out_size() + (static_cast<std::size_t>(oh) * w.out_w + ow) * w.channels + c;
            y_max[e] = pw::max_of_window(x.data() + n * w.in_size(), w, oh, ow, c, &arg[e]);
            y_avg[e] = pw::average_of_window(x.data() + n * w.in_size(), w, oh, ow, c);
          }
    for (int n = 0; n < batch; ++n)
      for (int h = 0; h < w.in_h; ++h)
        for (int col = 0; col < w.in_w; ++col)
          for (int c = 0; c < w.channels; ++c) {
            const std::size_t e = n * w.in_size() + (static_cast<std::size_t>(h) * w.in_w + col) * w.channels + c;
            dx_max[e] = pw::max_window_gradient(dy.data() + n * w.out_size(), arg.data() + n * w.out_size(), w, h, col, c);
            dx_avg[e] = pw::average_window_gradient(dy.data() + n * w.out_size(), w, h, col, c);
          }
    // The device's.
    auto x_d = to_device(x), dy_d = to_device(dy);
    cu::device_buffer y_d(dy.size() * 4), dx_d(x.size() * 4), arg_d(arg.size());
    const auto* xp = reinterpret_cast<const float*>(x_d.data());
    const auto* dyp = reinterpret_cast<const float*>(dy_d.data());
    auto* yp = reinterpret_cast<float*>(y_d.data());
    auto* dxp = reinterpret_cast<float*>(dx_d.data());
    cu::max_pool_forward(xp, yp, arg_d.data(), 1, w, batch, nullptr);
    CHECK(std::memcmp(from_device(y_d, dy.size()).data(), y_max.data(), dy.size() * 4) == 0);
    std::vector<std::uint8_t> arg_back(arg.size());
    TYPEFLOW_CUDA_CHECK(cudaMemcpy(arg_back.data(), arg_d.data(), arg.size(), cudaMemcpyDeviceToHost));
    CHECK(arg_back == arg);
    cu::max_pool_backward(dyp, arg_d.data(), 1, dxp, w, batch, nullptr);
    CHECK(std::memcmp(from_device(dx_d, x.size()).data(), dx_max.data(), x.size() * 4) == 0);
    cu::average_pool_forward(xp, yp, w, batch, nullptr);
    const auto avg = from_device(y_d, dy.size());
    cu::average_pool_backward(dyp, dxp, w, batch, nullptr);
    const auto avg_dx = from_device(dx_d, x.size());
    for (std::size_t i = 0; i < avg.size(); ++i) REQUIRE(avg[i] == doctest::Approx(y_avg[i]).epsilon(1e-6));
    for (std::size_t i = 0; i < avg_dx.size(); ++i) REQUIRE(avg_dx[i] == doctest::Approx(dx_avg[i]).epsilon(1e-6));
  }
}

namespace {

using namespace cuda_reference;

// make_data()'s 32 features as a (4, 4, 2) image.
template <class Pooling>
using image_net = tf::sequential<tf::input<32>, tf::reshape<4, 4, 2>, tf::dense<8>, tf::relu, Pooling, tf::flatten,
                                 tf::dense<10>>;

template <class Net, class Device>
std::vector<double> train_image_net() {
  const toy_data d = make_data();
  tf::model<Net, tf::float32, tf::single_device, Device> m(seed);
  m.compile(tf::optimizers::adam{.learning_rate = 0.01f},
            tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  auto data = tf::data::from_tensor_slices<tf::shape<32>>(d.features, d.labels) | tf::data::batch<batch>;
  std::vector<double> losses = m.fit(data, {.epochs = 3, .verbose = 0})["loss"];
  losses.push_back(m.evaluate(data).at("loss"));
  return losses;
}

template <class Net>
void check_trains_like_cpu() {
  // three epochs, then evaluate
  cuda_test::check_losses_agree(train_image_net<Net, tf::cuda>(), train_image_net<Net, tf::cpu>(), 2e-3, 2);
}

}  // namespace

TEST_CASE("cuda zero_padding2d kernels: the input inside zeros, and the gradient's interior back") {
  const cu::zero_padding p{3, 4, 2, 1, 2};  // (3, 4, 2) -> (5, 8, 2)
  constexpr int batch = 2, out_h = 5, out_w = 8;
  std::vector<float> x(batch * 3 * 4 * 2), dy(batch * out_h * out_w * 2);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
  for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = 0.5f * static_cast<float>(i);
  auto x_d = to_device(x), dy_d = to_device(dy);
  cu::device_buffer y_d(dy.size() * 4), dx_d(x.size() * 4);
  cu::zero_pad_forward(reinterpret_cast<const float*>(x_d.data()), reinterpret_cast<float*>(y_d.data()), p, batch,
                       nullptr);
  cu::zero_pad_backward(reinterpret_cast<const float*>(dy_d.data()), reinterpret_cast<float*>(dx_d.data()), p, batch,
                        nullptr);
  const auto y = from_device(y_d, dy.size()), dx = from_device(dx_d, x.size());
  for (int n = 0; n < batch; ++n)
    for (int h = 0; h < out_h; ++h)
      for (int w = 0; w < out_w; ++w)
        for (int c = 0; c < 2; ++c) {
          const bool inside = h >= 1 && h < 4 && w >= 2 && w < 6;
          const std::size_t o = ((static_cast<std::size_t>(n) * out_h + h) * out_w + w) * 2 + c;
          const std::size_t i = ((static_cast<std::size_t>(n) * 3 + (h - 1)) * 4 + (w - 2)) * 2 + c;
          CHECK(y[o] == (inside ? x[i] : 0.f));
          if (inside) CHECK(dx[i] == dy[o]);
        }
}

TEST_CASE("cuda model: max, average and global average pooling and zero padding train like the CPU model") {
  check_trains_like_cpu<image_net<tf::max_pooling2d<2>>>();
  check_trains_like_cpu<image_net<tf::zero_padding2d<{1, 2}>>>();
  check_trains_like_cpu<image_net<tf::average_pooling2d<3, 1, tf::padding::same>>>();
  check_trains_like_cpu<image_net<tf::global_average_pooling2d>>();
}

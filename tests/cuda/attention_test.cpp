// causal_self_attention on tf::cuda: the kernels (backend/cuda/attention.hpp)
// against their own arithmetic (core/attention_rows.hpp) run on the host in
// the same thread layout, and a small GPT (embedding, positions, pre-norm
// blocks with attention under recompute, tied logits) trained on both
// devices from the same seed and batches. tests/unit/attention_rows_test.cpp
// checks the same arithmetic against the CPU layer without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <typeflow/cuda.hpp>

#include "typeflow/backend/cuda/attention.hpp"
#include "typeflow/core/attention_rows.hpp"

#include "../support/relative_gap.hpp"
#include "../support/tiny_gpt.hpp"
#include "compare_losses.hpp"
#include "device_vectors.hpp"

namespace {

namespace cu = typeflow::backend::cuda;
namespace tf = typeflow;
namespace ar = typeflow::attention_rows;

using cuda_test::from_device;
using cuda_test::to_device;

using tf::testing::relative_gap;

// The kernels' threads on the host: y and statistics forward, d_qkv backward.
template <class Value, int Capacity>
void host_attention(const std::vector<float>& qkv, const std::vector<float>& d_y, const cu::attention_shape& s,
                    const tf::dropout_mask* mask, std::vector<float>& y, std::vector<float>& d_qkv) {
  const int T = s.steps, hd = s.head_width, D = s.heads * hd;
  const int threads = s.batch * s.heads * T;
  std::vector<ar::statistics> stats(threads);
  std::vector<float> delta(threads);
  auto run = [&](int pair, auto&& f) {
    if (mask) f(tf::attention_keep{*mask, static_cast<std::uint64_t>(pair) * T * T, T, mask->scale});
    else f(ar::keep_all{});
  };
  auto q0 = [&](int pair) { return static_cast<std::size_t>(pair / s.heads) * T * 3 * D + (pair % s.heads) * hd; };
  auto y0 = [&](int pair) { return static_cast<std::size_t>(pair / s.heads) * T * D + (pair % s.heads) * hd; };
  for (int r = 0; r < threads; ++r) {
    const int pair = r / T, i = r % T;
    const float* q = qkv.data() + q0(pair);
    float qi[Capacity];
    ar::load(qi, q + static_cast<std::size_t>(i) * 3 * D, hd);
    stats[r] = ar::row_statistics(qi, q + D, 3 * D, i, hd, s.scale);
    run(pair, [&](const auto& keep) {
      ar::row_output<Value>(qi, q + D, q + 2 * D, 3 * D, i, hd, s.scale, stats[r], keep,
                            y.data() + y0(pair) + static_cast<std::size_t>(i) * D);
    });
  }
  for (int r = 0; r < threads; ++r) {
    const int pair = r / T, i = r % T;
    const float* q = qkv.data() + q0(pair);
    float qi[Capacity], dy[Capacity];
    ar::load(qi, q + static_cast<std::size_t>(i) * 3 * D, hd);
    ar::load(dy, d_y.data() + y0(pair) + static_cast<std::size_t>(i) * D, hd);
    run(pair, [&](const auto& keep) {
      delta[r] = ar::row_query_gradient<Value>(qi, dy, q + D, q + 2 * D, 3 * D, i, hd, s.scale, stats[r], keep,
                                               d_qkv.data() + q0(pair) + static_cast<std::size_t>(i) * 3 * D);
    });
  }
  for (int r = 0; r < threads; ++r) {
    const int pair = r / T, j = r % T;
    const float* q = qkv.data() + q0(pair);
    float k[Capacity], v[Capacity];
    ar::load(k, q + D + static_cast<std::size_t>(j) * 3 * D, hd);
    ar::load(v, q + 2 * D + static_cast<std::size_t>(j) * 3 * D, hd);
    float* dk = d_qkv.data() + q0(pair) + D + static_cast<std::size_t>(j) * 3 * D;
    run(pair, [&](const auto& keep) {
      ar::row_key_gradient<Value>(k, v, q, d_y.data() + y0(pair), 3 * D, D, stats.data() + pair * T,
                                  delta.data() + pair * T, j, T, hd, s.scale, keep, dk, dk + D);
    });
  }
}

template <class Value, int Capacity>
void compare_kernels(int batch, int steps, int heads, int width, float rate, cu::attention_rounding rounding) {
  CAPTURE(steps);
  CAPTURE(width);
  CAPTURE(rate);
  const int D = heads * width;
  const cu::attention_shape s{batch, steps, heads, width, static_cast<float>(1.0 / std::sqrt(static_cast<double>(width)))};
  std::mt19937 rng(static_cast<std::uint32_t>(steps * 131 + width));
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  std::vector<float> qkv(static_cast<std::size_t>(batch) * steps * 3 * D), d_y(static_cast<std::size_t>(batch) * steps * D);
  for (float& v : qkv) v = ar::rounded<Value>(dist(rng));
  for (float& v : d_y) v = ar::rounded<Value>(dist(rng));
  const std::uint64_t seed = tf::attention_dropout_seed(5, 3), step = 11;
  const tf::dropout_mask mask = tf::make_dropout_mask(seed, step, rate);
  std::vector<float> y_host(d_y.size(), 0.f), d_qkv_host(qkv.size(), 0.f);
  host_attention<Value, Capacity>(qkv, d_y, s, rate > 0.f ? &mask : nullptr, y_host, d_qkv_host);

  auto qkv_d = to_device(qkv), d_y_d = to_device(d_y);
  cu::device_buffer y_d(d_y.size() * sizeof(float)), stats_d(static_cast<std::size_t>(batch) * heads * steps * 8),
      delta_d(static_cast<std::size_t>(batch) * heads * steps * 4), d_qkv_d(qkv.size() * sizeof(float));
  const cu::attention_dropout dropout{rate, cu::dropout_draw{seed, step, nullptr}};
  const auto* q = qkv_d.data<float>();
  cu::attention_forward(q, y_d.data<float>(), stats_d.data<float>(), s, dropout, rounding,
                        nullptr);
  cu::attention_backward(q, d_y_d.data<float>(), stats_d.data<float>(),
                         delta_d.data<float>(), d_qkv_d.data<float>(), s, dropout, rounding,
                         nullptr);
  const auto y = from_device(y_d, y_host.size()), d_qkv = from_device(d_qkv_d, d_qkv_host.size());
  // expf on the device and std::exp here differ by an ulp or two; a 16-bit
  // rounding may then land on the neighbouring value.
  const double tolerance = std::is_same_v<Value, float> ? 1e-5 : 2e-2;
  CHECK(relative_gap(y, y_host) < tolerance);
  CHECK(relative_gap(d_qkv, d_qkv_host) < tolerance);
}

}  // namespace

TEST_CASE("cuda attention kernels: the host's replay of their threads, float32 and bf16, with and without dropout") {
  using none = float;
  const auto f32 = cu::attention_rounding::none, bf = cu::attention_rounding::bfloat16;
  compare_kernels<none, 32>(2, 37, 3, 8, 0.f, f32);
  compare_kernels<none, 32>(1, 1, 2, 16, 0.f, f32);
  compare_kernels<none, 64>(2, 130, 2, 40, 0.f, f32);
  compare_kernels<none, 64>(1, 257, 2, 64, 0.1f, f32);
  compare_kernels<none, 128>(1, 65, 1, 100, 0.f, f32);
  compare_kernels<tf::bf16, 64>(2, 70, 3, 64, 0.f, bf);
  compare_kernels<tf::bf16, 32>(2, 33, 2, 32, 0.2f, bf);
}

TEST_CASE("cuda attention: a head wider than 128 is refused, naming the width") {
  cu::device_buffer any(64);
  const cu::attention_shape s{1, 4, 1, 129, 0.1f};
  CHECK_THROWS_WITH_AS(cu::attention_forward(any.data<float>(), any.data<float>(),
                                             any.data<float>(), s, {}, cu::attention_rounding::none,
                                             nullptr),
                       doctest::Contains("head width 129"), std::invalid_argument);
}

namespace {
constexpr int T = 16, D = 32, V = 29;
using toy = tf::testing::tiny_gpt<T, D, V>;
using dropping_block = tf::sequential<tf::residual<tf::layer_norm, tf::causal_self_attention<2, tf::attention_dropout<0.1f>>>,
                                      tf::residual<tf::layer_norm, tf::dense<4 * D>, tf::gelu, tf::dense<D>>>;

template <class Net, class Policy, class Device>
std::vector<double> gpt_losses() {
  tf::model<Net, Policy, tf::single_device, Device> model(3);
  model.compile(tf::optimizers::adam{.learning_rate = 1e-2},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  std::vector<double> out;
  for (int step = 0; step < 30; ++step) out.push_back(model.train_on_batch(toy::token_batch(7 + step % 8)));
  return out;
}

template <class Net, class Policy>
void compare_gpt(double tolerance) {
  const auto gpu = gpt_losses<Net, Policy, tf::cuda>();
  cuda_test::check_losses_agree(gpu, gpt_losses<Net, Policy, tf::cpu>(), tolerance, gpu.size() - 1);
}
}  // namespace

TEST_CASE("cuda model: a small GPT trains like the CPU model, float32 and mixed_bfloat16") {
  using net = toy::net<tf::repeat<2, tf::recompute<toy::block>>>;
  compare_gpt<net, tf::float32>(2e-3);
  compare_gpt<net, tf::mixed_bfloat16>(3e-2);
}

TEST_CASE("cuda model: with attention dropout the GPU drops the CPU's weights") {
  compare_gpt<toy::net<tf::repeat<2, dropping_block>>, tf::float32>(2e-3);
}

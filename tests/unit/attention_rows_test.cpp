// causal_self_attention's GPU path (backend/cuda/attention_executor.hpp and
// the kernels of backend/cuda/kernels/attention.cuh) replayed on the CPU:
// the projections as float32-accumulated products of the operands the GPU
// gives cuBLASLt, the heads as the kernels' threads (a thread per query row,
// then per key row) through the arithmetic they run
// (core/attention_rows.hpp), against the CPU layer (backend/cpu/attention.hpp)
// on the same inputs: outputs and every gradient, with and without
// attention dropout, in float32 and bfloat16. The GPU test
// (tests/cuda/attention_test.cpp) runs the kernels themselves where a
// device exists.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "typeflow/core/attention_rows.hpp"
#include "typeflow/layers/dropout_mask.hpp"

#include "../support/layer_harness.hpp"
#include "../support/relative_gap.hpp"
#include "../support/bound_layer.hpp"

namespace tf = typeflow;
namespace ar = typeflow::attention_rows;

namespace {

template <int T, int D, int Heads, class Compute, class... Options>
using attention = tf::testing::bound_layer<
    tf::causal_self_attention<Heads, Options...>, tf::shape<T, D>,
    tf::layer_context<1, tf::layer_norm, tf::dense<D>, 0, void, false, tf::layer_precision<Compute>>>;

// Value as the GPU holds it: rounded to the compute dtype (float: itself).
template <class Value>
std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = ar::rounded<Value>(x);
  return v;
}

// C (m, n) = A (m, k) · B (k, n) [+ bias], float32 accumulation in k's
// order; a and b read through accessors so that transposes are views.
template <class A, class B>
std::vector<float> product(int m, int n, int k, A a, B b, const float* bias = nullptr) {
  std::vector<float> c(static_cast<std::size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float s = 0.f;
      for (int l = 0; l < k; ++l) s += a(i, l) * b(l, j);
      c[static_cast<std::size_t>(i) * n + j] = bias ? s + bias[j] : s;
    }
  return c;
}

struct gpu_result {
  std::vector<float> out, d_x, d_qkv_kernel, d_qkv_bias, d_proj_kernel, d_proj_bias;
};

// The executor's forward and backward for harness h's inputs and parameters,
// with the kernels' threads replayed; `step` is the dropout mask's.
template <class Layer, int Batch, class Value, class H>
gpu_result replay_gpu(H& h, bool dropping, std::uint64_t step) {
  constexpr int T = Layer::steps, D = Layer::width, heads = Layer::heads, hd = Layer::head_width;
  constexpr int rows = Batch * T, capacity = ar::capacity_for(hd);
  const float scale = static_cast<float>(1.0 / std::sqrt(double{hd}));
  auto param = [&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
    std::vector<float> p(H::template size_of<I>);
    for (std::size_t e = 0; e < p.size(); ++e) p[e] = h.template param<I>(e);
    return rounded<Value>(p);
  };
  const auto w_qkv = param(std::integral_constant<std::size_t, 0>{});
  const auto b_qkv = param(std::integral_constant<std::size_t, 1>{});
  const auto w_proj = param(std::integral_constant<std::size_t, 2>{});
  const auto b_proj = param(std::integral_constant<std::size_t, 3>{});
  const auto x = rounded<Value>(h.in);
  auto matrix = [](const std::vector<float>& v, int cols) {
    return [&v, cols](int i, int j) { return v[static_cast<std::size_t>(i) * cols + j]; };
  };
  auto transposed = [](const std::vector<float>& v, int cols) {
    return [&v, cols](int i, int j) { return v[static_cast<std::size_t>(j) * cols + i]; };
  };

  // Forward: qkv, the heads, the projection.
  const auto qkv = rounded<Value>(product(rows, 3 * D, D, matrix(x, D), matrix(w_qkv, 3 * D), b_qkv.data()));
  std::vector<float> y(static_cast<std::size_t>(rows) * D);
  std::vector<ar::statistics> stats(static_cast<std::size_t>(Batch) * heads * T);
  const tf::dropout_mask mask =
      tf::make_dropout_mask(tf::attention_dropout_seed(h.run.seed, 0), step, Layer::attention_dropout_rate);
  auto with_keep = [&](int pair, auto&& f) {
    if (dropping) f(tf::attention_keep{mask, static_cast<std::uint64_t>(pair) * T * T, T, mask.scale});
    else f(ar::keep_all{});
  };
  auto q0_of = [&](int pair) { return qkv.data() + static_cast<std::size_t>(pair / heads) * T * 3 * D + (pair % heads) * hd; };
  auto y0_of = [&](int pair) { return static_cast<std::size_t>(pair / heads) * T * D + (pair % heads) * hd; };
  const int threads = Batch * heads * T;
  for (int r = 0; r < threads; ++r) {  // forward_rows
    const int pair = r / T, i = r % T;
    const float* q0 = q0_of(pair);
    float q[capacity];
    ar::load(q, q0 + static_cast<std::size_t>(i) * 3 * D, hd);
    stats[r] = ar::row_statistics(q, q0 + D, 3 * D, i, hd, scale);
    with_keep(pair, [&](const auto& keep) {
      ar::row_output<Value>(q, q0 + D, q0 + 2 * D, 3 * D, i, hd, scale, stats[r], keep,
                            y.data() + y0_of(pair) + static_cast<std::size_t>(i) * D);
    });
  }
  y = rounded<Value>(y);
  gpu_result g;
  g.out = rounded<Value>(product(rows, D, D, matrix(y, D), matrix(w_proj, D), b_proj.data()));

  // Backward: the projection's gradients, the heads', qkv's.
  const auto d_out = rounded<Value>(h.d_out);
  g.d_proj_kernel = product(D, D, rows, transposed(y, D), matrix(d_out, D));
  g.d_proj_bias = product(1, D, rows, [](int, int) { return 1.f; }, matrix(d_out, D));
  const auto d_y = rounded<Value>(product(rows, D, D, matrix(d_out, D), transposed(w_proj, D)));
  std::vector<float> d_qkv(static_cast<std::size_t>(rows) * 3 * D, -7.f), delta(static_cast<std::size_t>(threads));
  for (int r = 0; r < threads; ++r) {  // query_rows
    const int pair = r / T, i = r % T;
    const float* q0 = q0_of(pair);
    float q[capacity], dy[capacity];
    ar::load(q, q0 + static_cast<std::size_t>(i) * 3 * D, hd);
    ar::load(dy, d_y.data() + y0_of(pair) + static_cast<std::size_t>(i) * D, hd);
    float* dq = d_qkv.data() + (q0 - qkv.data()) + static_cast<std::size_t>(i) * 3 * D;
    with_keep(pair, [&](const auto& keep) {
      delta[r] = ar::row_query_gradient<Value>(q, dy, q0 + D, q0 + 2 * D, 3 * D, i, hd, scale, stats[r], keep, dq);
    });
  }
  for (int r = 0; r < threads; ++r) {  // key_rows
    const int pair = r / T, j = r % T;
    const float* q0 = q0_of(pair);
    float k[capacity], v[capacity];
    ar::load(k, q0 + D + static_cast<std::size_t>(j) * 3 * D, hd);
    ar::load(v, q0 + 2 * D + static_cast<std::size_t>(j) * 3 * D, hd);
    float* dk = d_qkv.data() + (q0 - qkv.data()) + D + static_cast<std::size_t>(j) * 3 * D;
    const std::size_t first = static_cast<std::size_t>(pair) * T;
    with_keep(pair, [&](const auto& keep) {
      ar::row_key_gradient<Value>(k, v, q0, d_y.data() + y0_of(pair), 3 * D, D, stats.data() + first,
                                  delta.data() + first, j, T, hd, scale, keep, dk, dk + D);
    });
  }
  d_qkv = rounded<Value>(d_qkv);
  g.d_qkv_kernel = product(D, 3 * D, rows, transposed(x, D), matrix(d_qkv, 3 * D));
  g.d_qkv_bias = product(1, 3 * D, rows, [](int, int) { return 1.f; }, matrix(d_qkv, 3 * D));
  g.d_x = product(rows, D, 3 * D, matrix(d_qkv, 3 * D), transposed(w_qkv, 3 * D));
  return g;
}

using tf::testing::relative_gap;

template <class H, std::size_t I>
std::vector<float> gradient_of(const H& h) {
  std::vector<float> g(H::template size_of<I>);
  for (std::size_t e = 0; e < g.size(); ++e) g[e] = h.template grad<I>(e);
  return g;
}

// The CPU layer and the replayed GPU path on the same inputs: every result
// within `tolerance` of the CPU's (relative to its largest magnitude).
template <class Layer, int Batch, class Value>
void compare(bool dropping, double tolerance) {
  tf::testing::harness<Layer, Batch> h;
  h.fill_randomly(Layer::steps);
  h.executor.forward();
  h.executor.backward();
  const gpu_result g = replay_gpu<Layer, Batch, Value>(h, dropping, h.run.step);
  CHECK(relative_gap(g.out, h.out) <= tolerance);
  CHECK(relative_gap(g.d_x, h.d_in) <= tolerance);
  CHECK(relative_gap(g.d_qkv_kernel, gradient_of<decltype(h), 0>(h)) <= tolerance);
  CHECK(relative_gap(g.d_qkv_bias, gradient_of<decltype(h), 1>(h)) <= tolerance);
  CHECK(relative_gap(g.d_proj_kernel, gradient_of<decltype(h), 2>(h)) <= tolerance);
  CHECK(relative_gap(g.d_proj_bias, gradient_of<decltype(h), 3>(h)) <= tolerance);
  if (dropping) {  // another step's mask is another output: the comparison sees the mask
    const gpu_result other = replay_gpu<Layer, Batch, Value>(h, dropping, h.run.step + 1);
    CHECK(relative_gap(other.out, h.out) > 20 * tolerance);
  }
}

}  // namespace

TEST_CASE("attention on the GPU, replayed: float32 matches the CPU layer, head widths 8, 16 and 40") {
  compare<attention<13, 16, 2, tf::float32>, 2, float>(false, 2e-6);
  compare<attention<33, 48, 3, tf::float32>, 2, float>(false, 2e-6);
  compare<attention<9, 80, 2, tf::float32>, 3, float>(false, 2e-6);
  compare<attention<1, 8, 1, tf::float32>, 2, float>(false, 2e-6);  // one position: P = 1
}

TEST_CASE("attention on the GPU, replayed: attention dropout draws the CPU layer's mask") {
  compare<attention<13, 16, 2, tf::float32, tf::attention_dropout<0.25f>>, 2, float>(true, 2e-6);
  compare<attention<33, 48, 3, tf::float32, tf::attention_dropout<0.1f>>, 2, float>(true, 2e-6);
}

TEST_CASE("attention on the GPU, replayed: bfloat16 rounds where the CPU layer rounds") {
  // The CPU rounds the parameters' gradients and d_x to bf16 as well, and
  // its native bf16 products may add in another order: within 2 bf16 ulps
  // (seen: 2.7e-3, 2026-12-06); float32 within 6.3e-7.
  compare<attention<13, 16, 2, tf::bfloat16>, 2, tf::bf16>(false, 8e-3);
  compare<attention<17, 48, 3, tf::bfloat16, tf::attention_dropout<0.2f>>, 2, tf::bf16>(true, 8e-3);
}

namespace {

template <int Length, int D, int Heads, class Compute>
using decoding_attention = tf::testing::bound_layer<
    tf::causal_self_attention<Heads>, tf::shape<1, D>,
    tf::layer_context<1, tf::layer_norm, tf::dense<D>, Length, void, false, tf::layer_precision<Compute>>>;

// attention_decode_executor's forward for one fed position, replayed:
// qkv's rows, the caches (per sample keys then values, Length x D each),
// decode_rows's threads (one per sample and head), the projection.
template <class Layer, int Batch, class Value, class H>
std::vector<float> replay_decode(H& h, std::vector<float>& caches, int position) {
  constexpr int D = Layer::width, heads = Layer::heads, hd = Layer::head_width, length = Layer::decode_length;
  constexpr int capacity = ar::capacity_for(hd);
  const float scale = static_cast<float>(1.0 / std::sqrt(double{hd}));
  auto param = [&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
    std::vector<float> p(H::template size_of<I>);
    for (std::size_t e = 0; e < p.size(); ++e) p[e] = ar::rounded<Value>(h.template param<I>(e));
    return p;
  };
  const auto w_qkv = param(std::integral_constant<std::size_t, 0>{});
  const auto b_qkv = param(std::integral_constant<std::size_t, 1>{});
  const auto w_proj = param(std::integral_constant<std::size_t, 2>{});
  const auto b_proj = param(std::integral_constant<std::size_t, 3>{});
  const auto x = rounded<Value>(h.in);
  auto matrix = [](const std::vector<float>& v, int cols) {
    return [&v, cols](int i, int j) { return v[static_cast<std::size_t>(i) * cols + j]; };
  };
  const auto qkv = rounded<Value>(product(Batch, 3 * D, D, matrix(x, D), matrix(w_qkv, 3 * D), b_qkv.data()));
  const std::size_t cache = static_cast<std::size_t>(length) * D;
  for (int b = 0; b < Batch; ++b)
    for (int part = 1; part <= 2; ++part)
      for (int i = 0; i < D; ++i)
        caches[b * 2 * cache + (part - 1) * cache + static_cast<std::size_t>(position) * D + i] =
            qkv[static_cast<std::size_t>(b) * 3 * D + part * D + i];
  std::vector<float> y(static_cast<std::size_t>(Batch) * D);
  for (int r = 0; r < Batch * heads; ++r) {  // decode_rows
    const int b = r / heads, hh = r % heads;
    const float* keys = caches.data() + b * 2 * cache + hh * hd;
    float q[capacity];
    ar::load(q, qkv.data() + static_cast<std::size_t>(b) * 3 * D + hh * hd, hd);
    const ar::statistics st = ar::row_statistics(q, keys, D, position, hd, scale);
    ar::row_output<Value>(q, keys, keys + cache, D, position, hd, scale, st, ar::keep_all{},
                          y.data() + static_cast<std::size_t>(b) * D + hh * hd);
  }
  y = rounded<Value>(y);
  return rounded<Value>(product(Batch, D, D, matrix(y, D), matrix(w_proj, D), b_proj.data()));
}

template <class Layer, int Batch, class Value>
void compare_decode(double tolerance) {
  tf::testing::harness<Layer, Batch> h;
  h.fill_randomly(3);
  h.run.training = false;
  std::vector<float> caches(static_cast<std::size_t>(Batch) * 2 * Layer::decode_length * Layer::width, 0.f);
  for (int t = 0; t < Layer::decode_length; ++t) {
    CAPTURE(t);
    for (std::size_t i = 0; i < h.in.size(); ++i) h.in[i] = tf::testing::wobble(i, 50 + t);
    h.run.position = t;
    h.executor.forward();
    CHECK(relative_gap(replay_decode<Layer, Batch, Value>(h, caches, t), h.out) <= tolerance);
  }
}

}  // namespace

TEST_CASE("attention decoding on the GPU, replayed: each position's output is the CPU decoder's") {
  compare_decode<decoding_attention<11, 24, 3, tf::float32>, 2, float>(2e-6);
  compare_decode<decoding_attention<7, 80, 2, tf::float32>, 1, float>(2e-6);
  compare_decode<decoding_attention<9, 48, 3, tf::bfloat16>, 2, tf::bf16>(8e-3);
}

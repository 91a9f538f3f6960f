// Pooling and padding layers (layers/pooling.hpp, layers/zero_padding2d.hpp):
// compile-time shapes, forward values and input gradients against naive
// references written here, and finite-difference checks in small networks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <typeflow/typeflow.hpp>
#include <typeflow/backend/cpu/pooling.hpp>
#include <typeflow/backend/cpu/zero_padding2d.hpp>
#include <typeflow/layers/zero_padding2d.hpp>

#include "../support/bound_layer.hpp"
#include "../support/gradient_check.hpp"

namespace tf = typeflow;
using typeflow::testing::check_gradients;

namespace {

template <class Spec, class In>
using bound = tf::testing::bound_layer<Spec, In, tf::layer_context<1, void, void>>;
template <class Spec, class In, class Out>
constexpr bool gives = std::is_same_v<typename bound<Spec, In>::output_shape, Out>;

// A deterministic pseudo-random value in [-1, 1) for index i: distinct
// values, so max pooling sees no ties.
float wobble(std::uint64_t i, std::uint64_t salt = 0) {
  return 2.f * tf::random_stream{4321 + salt, 0}.uniform(i) - 1.f;
}

// Keras's pooling, written plainly: every output element visits its window
// and keeps the in-bounds elements.
struct pool_config {
  int h, w, c;             // input (per sample)
  int ph, pw, sh, sw;      // pool and strides
  bool same;               // padding::same
};

struct pool_geometry {
  int out_h, out_w, top, left;
};

pool_geometry geometry_of(const pool_config& k) {
  pool_geometry g{};
  if (k.same) {
    g.out_h = (k.h + k.sh - 1) / k.sh;
    g.out_w = (k.w + k.sw - 1) / k.sw;
    g.top = std::max((g.out_h - 1) * k.sh + k.ph - k.h, 0) / 2;
    g.left = std::max((g.out_w - 1) * k.sw + k.pw - k.w, 0) / 2;
  } else {
    g.out_h = (k.h - k.ph) / k.sh + 1;
    g.out_w = (k.w - k.pw) / k.sw + 1;
  }
  return g;
}

// Forward output and input gradient for a batch: max pooling sends each
// output's gradient to the first maximum in window order; average pooling
// spreads it evenly over the window's in-bounds elements.
void reference_pool(const pool_config& k, bool max, int batch, const std::vector<float>& x,
                    const std::vector<float>& dy, std::vector<float>& y, std::vector<float>& dx) {
  const pool_geometry g = geometry_of(k);
  y.assign(static_cast<std::size_t>(batch) * g.out_h * g.out_w * k.c, 0.f);
  dx.assign(x.size(), 0.f);
  auto in_at = [&](int n, int h, int w, int c) { return ((static_cast<std::size_t>(n) * k.h + h) * k.w + w) * k.c + c; };
  for (int n = 0; n < batch; ++n)
    for (int oh = 0; oh < g.out_h; ++oh)
      for (int ow = 0; ow < g.out_w; ++ow)
        for (int c = 0; c < k.c; ++c) {
          const std::size_t o = ((static_cast<std::size_t>(n) * g.out_h + oh) * g.out_w + ow) * k.c + c;
          float best = -std::numeric_limits<float>::infinity(), sum = 0.f;
          std::size_t best_at = 0;
          int count = 0;
          for (int i = 0; i < k.ph; ++i)
            for (int j = 0; j < k.pw; ++j) {
              const int h = oh * k.sh - g.top + i, w = ow * k.sw - g.left + j;
              if (h < 0 || h >= k.h || w < 0 || w >= k.w) continue;
              const float v = x[in_at(n, h, w, c)];
              if (v > best) {
                best = v;
                best_at = in_at(n, h, w, c);
              }
              sum += v;
              ++count;
            }
          REQUIRE(count > 0);
          if (max) {
            y[o] = best;
            dx[best_at] += dy[o];
          } else {
            y[o] = sum / static_cast<float>(count);
            for (int i = 0; i < k.ph; ++i)
              for (int j = 0; j < k.pw; ++j) {
                const int h = oh * k.sh - g.top + i, w = ow * k.sw - g.left + j;
                if (h < 0 || h >= k.h || w < 0 || w >= k.w) continue;
                dx[in_at(n, h, w, c)] += dy[o] / static_cast<float>(count);
              }
          }
        }
}

// Runs one bound layer's executor over a batch: forward in training mode,
// backward into a d_in full of NaN (every element must be written).
template <class Layer, int Batch>
struct run_layer {
  using in_shape = typename Layer::input_shape;
  using out_shape = typename Layer::output_shape;
  std::vector<float> x, y, dy, dx;
  std::vector<std::byte> workspace;
  tf::run_state run{.training = true};
  tf::layer_io<tf::cpu> io;

  explicit run_layer(const std::vector<float>& input, const std::vector<float>& d_out)
      : x(input), y(Batch * out_shape::size, -7.f), dy(d_out),
        dx(Batch * in_shape::size, std::numeric_limits<float>::quiet_NaN()),
        workspace(Batch * Layer::workspace_bytes_per_sample + 1) {
    io.in = x.data();
    io.out = y.data();
    io.d_in = dx.data();
    io.d_out = dy.data();
    io.workspace = workspace.data();
    io.run = &run;
  }
  void forward() {
    tf::executor<typename Layer::spec, Layer, Batch, tf::cpu> e(io);
    e.forward();
  }
  void backward() {
    tf::executor<typename Layer::spec, Layer, Batch, tf::cpu> e(io);
    e.backward();
  }
};

// The GPU's pooling kernels (backend/cuda/kernels/pooling.cuh), a thread per
// output element forward and per input element backward, replayed through
// the functions they run (core/pool_windows.hpp): the CPU layer's outputs,
// argmax and gradients, to the bit.
template <class Layer, int Batch>
void replay_gpu_threads(const run_layer<Layer, Batch>& cpu, bool max) {
  namespace pw = tf::pool_windows;
  using index_type = typename decltype([] {
    if constexpr (requires { typename Layer::index_type; })
      return std::type_identity<typename Layer::index_type>{};
    else
      return std::type_identity<std::uint8_t>{};  // average pooling keeps none
  }())::type;
  constexpr pw::window_2d w = Layer::geometry::windows;
  std::vector<float> y(Batch * w.out_size()), dx(Batch * w.in_size());
  std::vector<index_type> arg(y.size());
  for (int n = 0; n < Batch; ++n)
    for (int oh = 0; oh < w.out_h; ++oh)
      for (int ow = 0; ow < w.out_w; ++ow)
        for (int c = 0; c < w.channels; ++c) {
          const std::size_t e = n * w.out_size() + (static_cast<std::size_t>(oh) * w.out_w + ow) * w.channels + c;
          const float* x = cpu.x.data() + n * w.in_size();
          y[e] = max ? pw::max_of_window(x, w, oh, ow, c, &arg[e]) : pw::average_of_window(x, w, oh, ow, c);
        }
  for (int n = 0; n < Batch; ++n)
    for (int h = 0; h < w.in_h; ++h)
      for (int x = 0; x < w.in_w; ++x)
        for (int c = 0; c < w.channels; ++c) {
          const std::size_t e = n * w.in_size() + (static_cast<std::size_t>(h) * w.in_w + x) * w.channels + c;
          const float* dy = cpu.dy.data() + n * w.out_size();
          dx[e] = max ? pw::max_window_gradient(dy, arg.data() + n * w.out_size(), w, h, x, c)
                      : pw::average_window_gradient(dy, w, h, x, c);
        }
  if (max) {  // comparisons and copies only: to the bit
    CHECK(std::memcmp(y.data(), cpu.y.data(), y.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(dx.data(), cpu.dx.data(), dx.size() * sizeof(float)) == 0);
  } else {  // a vectorised CPU loop may fuse d += g * scale into an FMA where the replay does not
    for (std::size_t i = 0; i < y.size(); ++i) REQUIRE(y[i] == doctest::Approx(cpu.y[i]).epsilon(1e-6));
    for (std::size_t i = 0; i < dx.size(); ++i) REQUIRE(dx[i] == doctest::Approx(cpu.dx[i]).epsilon(1e-6));
  }
  if (max) CHECK(std::memcmp(arg.data(), cpu.workspace.data(), arg.size() * sizeof(index_type)) == 0);
}

template <class Spec, int H, int W, int C>
void check_pool_against_reference(pool_config k, bool max) {
  constexpr int batch = 3;
  using layer = bound<Spec, tf::shape<H, W, C>>;
  k.h = H;
  k.w = W;
  k.c = C;
  const pool_geometry g = geometry_of(k);
  REQUIRE(layer::output_shape::dims[0] == g.out_h);
  REQUIRE(layer::output_shape::dims[1] == g.out_w);
  REQUIRE(layer::output_shape::dims[2] == C);
  std::vector<float> x(batch * H * W * C), dy(batch * layer::output_shape::size);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = wobble(i);
  for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = wobble(i, 1);
  std::vector<float> y_ref, dx_ref;
  reference_pool(k, max, batch, x, dy, y_ref, dx_ref);

  run_layer<layer, batch> r(x, dy);
  r.forward();
  r.backward();
  INFO(Spec::type_name() << " on (" << H << ", " << W << ", " << C << ")");
  for (std::size_t i = 0; i < y_ref.size(); ++i) {
    INFO("output " << i);
    CHECK(r.y[i] == doctest::Approx(y_ref[i]).epsilon(1e-6));
  }
  for (std::size_t i = 0; i < dx_ref.size(); ++i) {
    INFO("d_in " << i);
    CHECK(r.dx[i] == doctest::Approx(dx_ref[i]).epsilon(1e-5));
  }
  // Inference (no argmax kept) gives the same output.
  const std::vector<float> trained = r.y;
  r.run.training = false;
  r.forward();
  CHECK(r.y == trained);
  r.run.training = true;
  r.forward();  // the argmax again, for the replay below
  replay_gpu_threads<layer, batch>(r, max);
  // No gradient wanted: backward leaves everything alone.
  r.io.d_in = nullptr;
  r.backward();
}

constexpr pool_config pool(int ph, int pw, int sh, int sw, bool same) { return {0, 0, 0, ph, pw, sh, sw, same}; }

const tf::losses::sparse_categorical_crossentropy logits_loss{.from_logits = true};

constexpr int batch_size = 4;
using image = tf::data::tensor_value<float, tf::shape<6, 7, 3>>;
using class_label = tf::data::tensor_value<std::int32_t, tf::shape<>>;

// Features x(n, h, w, c) = s(h, w) * v(n, c), with s = 1 + ((h + 3w) mod 11) / 4
// distinct within every window up to 3 x 3. The dense<4> before the pooling
// then gives y_j = s * a_j + b_j, whose order in a window does not change
// when a kernel entry moves by the check's step h = 1e-2 (unless |a_j| is
// below 1e-2 |v|), so max pooling's argmax stays put and the finite
// differences see no kink.
tf::data::batch_of<batch_size, image, class_label> image_batch() {
  tf::data::batch_of<batch_size, image, class_label> b;
  for (int n = 0; n < batch_size; ++n)
    for (int h = 0; h < 6; ++h)
      for (int w = 0; w < 7; ++w)
        for (int c = 0; c < 3; ++c)
          b.features[((n * 6 + h) * 7 + w) * 3 + c] =
              (1.f + static_cast<float>((h + 3 * w) % 11) / 4.f) * wobble(static_cast<std::uint64_t>(n * 3 + c), 7);
  for (int i = 0; i < batch_size; ++i) b.labels[i] = i % 3;
  b.valid = batch_size;
  return b;
}

template <class... Layers>
using image_net = tf::sequential<tf::input<6, 7, 3>, tf::dense<4>, Layers..., tf::flatten, tf::dense<3>>;

}  // namespace

// ---------------------------------------------------------------------------
// Shapes and other compile-time facts.

TEST_CASE("pooling_test: output shapes follow Keras's formulas") {
  using tf::padding;
  using tf::shape;
  // The MNIST CNN's two pools.
  static_assert(gives<tf::max_pooling2d<>, shape<26, 26, 32>, shape<13, 13, 32>>);
  static_assert(gives<tf::max_pooling2d<2>, shape<11, 11, 64>, shape<5, 5, 64>>);
  // Overlapping windows, valid and same.
  static_assert(gives<tf::max_pooling2d<3, 2>, shape<7, 8, 5>, shape<3, 3, 5>>);
  static_assert(gives<tf::max_pooling2d<3, 2, padding::same>, shape<7, 8, 5>, shape<4, 4, 5>>);
  // Total padding (4 - 1) * 2 + 3 - 7 = 2 rows, 1 on top; 3 * 2 + 3 - 8 = 1 column, 0 on the left.
  static_assert(bound<tf::max_pooling2d<3, 2, padding::same>, shape<7, 8, 5>>::geometry::top == 1);
  static_assert(bound<tf::max_pooling2d<3, 2, padding::same>, shape<7, 8, 5>>::geometry::left == 0);
  // Stride 1.
  static_assert(gives<tf::average_pooling2d<2, 1>, shape<5, 6, 2>, shape<4, 5, 2>>);
  static_assert(gives<tf::average_pooling2d<2, 1, padding::same>, shape<5, 6, 2>, shape<5, 6, 2>>);
  // Non-square windows and strides.
  static_assert(gives<tf::average_pooling2d<{2, 3}>, shape<6, 7, 3>, shape<3, 2, 3>>);
  static_assert(gives<tf::max_pooling2d<{2, 3}, {1, 2}, padding::same>, shape<6, 7, 3>, shape<6, 4, 3>>);
  // Same padding with a window larger than the input.
  static_assert(gives<tf::max_pooling2d<{5, 4}, {2, 3}, padding::same>, shape<3, 7, 2>, shape<2, 3, 2>>);
  // Stride larger than the pool: gaps between windows.
  static_assert(gives<tf::max_pooling2d<2, 3>, shape<8, 8, 1>, shape<3, 3, 1>>);

  static_assert(gives<tf::global_average_pooling2d, shape<11, 11, 64>, shape<64>>);
  static_assert(gives<tf::zero_padding2d<>, shape<28, 28, 1>, shape<30, 30, 1>>);
  static_assert(gives<tf::zero_padding2d<{2, 1}>, shape<3, 4, 5>, shape<7, 6, 5>>);
  static_assert(gives<tf::zero_padding2d<0>, shape<3, 4, 5>, shape<3, 4, 5>>);

  using net = tf::sequential<tf::input<6, 7, 3>, tf::dense<4>, tf::max_pooling2d<2>, tf::flatten, tf::dense<3>>;
  static_assert(std::is_same_v<net::layer<2>::output_shape, shape<3, 3, 4>>);
  static_assert(net::output_shape == shape<3>{});
  static_assert(net::parameter_count == 3 * 4 + 4 + 36 * 3 + 3);
}

TEST_CASE("pooling_test: workspace, FLOPs and names") {
  using tf::shape;
  using max_pool = bound<tf::max_pooling2d<2>, shape<26, 26, 32>>;
  static_assert(max_pool::workspace_bytes_per_sample == 13 * 13 * 32);  // one byte of argmax per output
  static_assert(max_pool::flops_per_sample == 13 * 13 * 32 * 4);
  static_assert(bound<tf::average_pooling2d<2>, shape<26, 26, 32>>::workspace_bytes_per_sample == 0);
  static_assert(bound<tf::global_average_pooling2d, shape<4, 4, 8>>::flops_per_sample == 4 * 4 * 8 + 8);
  CHECK(tf::max_pooling2d<>::type_name() == "max_pooling2d<2>");
  CHECK(tf::max_pooling2d<3, 2>::type_name() == "max_pooling2d<3, 2>");
  CHECK(tf::average_pooling2d<{2, 3}, {1, 2}, tf::padding::same>::type_name() ==
        "average_pooling2d<{2, 3}, {1, 2}, same>");
  CHECK(tf::max_pooling2d<2, 2, tf::padding::same>::type_name() == "max_pooling2d<2, 2, same>");
  CHECK(tf::global_average_pooling2d::type_name() == "global_average_pooling2d");
  CHECK(tf::zero_padding2d<{2, 1}>::type_name() == "zero_padding2d<{2, 1}>");
}

// ---------------------------------------------------------------------------
// Forward values and input gradients against the reference.

TEST_CASE("pooling_test: max pooling matches the reference, valid padding") {
  using tf::max_pooling2d;
  check_pool_against_reference<max_pooling2d<2>, 6, 7, 3>(pool(2, 2, 2, 2, false), true);
  check_pool_against_reference<max_pooling2d<2, 1>, 5, 6, 2>(pool(2, 2, 1, 1, false), true);
  check_pool_against_reference<max_pooling2d<3, 2>, 7, 8, 5>(pool(3, 3, 2, 2, false), true);
  check_pool_against_reference<max_pooling2d<{2, 3}>, 6, 7, 3>(pool(2, 3, 2, 3, false), true);
  check_pool_against_reference<max_pooling2d<2, 3>, 8, 8, 1>(pool(2, 2, 3, 3, false), true);
  check_pool_against_reference<max_pooling2d<2>, 4, 5, 70>(pool(2, 2, 2, 2, false), true);  // > 64 channels
}

TEST_CASE("pooling_test: max pooling matches the reference, same padding") {
  using tf::max_pooling2d;
  using tf::padding;
  check_pool_against_reference<max_pooling2d<2, 2, padding::same>, 5, 7, 3>(pool(2, 2, 2, 2, true), true);
  check_pool_against_reference<max_pooling2d<2, 1, padding::same>, 5, 6, 2>(pool(2, 2, 1, 1, true), true);
  check_pool_against_reference<max_pooling2d<3, 2, padding::same>, 7, 8, 5>(pool(3, 3, 2, 2, true), true);
  check_pool_against_reference<max_pooling2d<3, 1, padding::same>, 4, 4, 3>(pool(3, 3, 1, 1, true), true);
  check_pool_against_reference<max_pooling2d<{2, 3}, {1, 2}, padding::same>, 6, 7, 3>(pool(2, 3, 1, 2, true), true);
  check_pool_against_reference<max_pooling2d<{5, 4}, {2, 3}, padding::same>, 3, 7, 2>(pool(5, 4, 2, 3, true), true);
}

TEST_CASE("pooling_test: average pooling matches the reference, valid padding") {
  using tf::average_pooling2d;
  check_pool_against_reference<average_pooling2d<2>, 6, 7, 3>(pool(2, 2, 2, 2, false), false);
  check_pool_against_reference<average_pooling2d<2, 1>, 5, 6, 2>(pool(2, 2, 1, 1, false), false);
  check_pool_against_reference<average_pooling2d<3, 2>, 7, 8, 5>(pool(3, 3, 2, 2, false), false);
  check_pool_against_reference<average_pooling2d<{2, 3}>, 6, 7, 3>(pool(2, 3, 2, 3, false), false);
  check_pool_against_reference<average_pooling2d<2, 3>, 8, 8, 1>(pool(2, 2, 3, 3, false), false);
  check_pool_against_reference<average_pooling2d<2>, 4, 5, 70>(pool(2, 2, 2, 2, false), false);
}

TEST_CASE("pooling_test: average pooling matches the reference, same padding excludes the padding") {
  using tf::average_pooling2d;
  using tf::padding;
  check_pool_against_reference<average_pooling2d<2, 2, padding::same>, 5, 7, 3>(pool(2, 2, 2, 2, true), false);
  check_pool_against_reference<average_pooling2d<2, 1, padding::same>, 5, 6, 2>(pool(2, 2, 1, 1, true), false);
  check_pool_against_reference<average_pooling2d<3, 2, padding::same>, 7, 8, 5>(pool(3, 3, 2, 2, true), false);
  check_pool_against_reference<average_pooling2d<3, 1, padding::same>, 4, 4, 3>(pool(3, 3, 1, 1, true), false);
  check_pool_against_reference<average_pooling2d<{2, 3}, {1, 2}, padding::same>, 6, 7, 3>(pool(2, 3, 1, 2, true),
                                                                                          false);
  check_pool_against_reference<average_pooling2d<{5, 4}, {2, 3}, padding::same>, 3, 7, 2>(pool(5, 4, 2, 3, true),
                                                                                          false);
}

TEST_CASE("pooling_test: hand-worked values, same padding at the corner") {
  // One channel, 3 x 3 input 1..9, pool 2 stride 2 same: out 2 x 2, padding
  // only at the bottom and right (total 1, top/left 0).
  using layer_max = bound<tf::max_pooling2d<2, 2, tf::padding::same>, tf::shape<3, 3, 1>>;
  using layer_avg = bound<tf::average_pooling2d<2, 2, tf::padding::same>, tf::shape<3, 3, 1>>;
  const std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8, 9}, dy{1, 1, 1, 1};
  run_layer<layer_max, 1> m(x, dy);
  m.forward();
  CHECK(m.y == std::vector<float>{5, 6, 8, 9});
  m.backward();
  CHECK(m.dx == std::vector<float>{0, 0, 0, 0, 1, 1, 0, 1, 1});
  run_layer<layer_avg, 1> a(x, dy);
  a.forward();
  CHECK(a.y == std::vector<float>{3, 4.5f, 7.5f, 9});  // (1+2+4+5)/4, (3+6)/2, (7+8)/2, 9/1
  a.backward();
  CHECK(a.dx == std::vector<float>{0.25f, 0.25f, 0.5f, 0.25f, 0.25f, 0.5f, 0.5f, 0.5f, 1.f});
}

TEST_CASE("pooling_test: max pooling sends a tie's gradient to the first element in window order") {
  // All equal: each window's first element (top-left) takes the gradient.
  using layer = bound<tf::max_pooling2d<2>, tf::shape<4, 4, 2>>;
  std::vector<float> x(32, 1.f), dy(8);
  for (int i = 0; i < 8; ++i) dy[i] = static_cast<float>(i + 1);
  run_layer<layer, 1> r(x, dy);
  r.forward();
  r.backward();
  for (int h = 0; h < 4; ++h)
    for (int w = 0; w < 4; ++w)
      for (int c = 0; c < 2; ++c) {
        const float expected = (h % 2 == 0 && w % 2 == 0) ? dy[((h / 2) * 2 + w / 2) * 2 + c] : 0.f;
        CHECK(r.dx[(h * 4 + w) * 2 + c] == expected);
      }

  // Overlapping windows (pool 3, stride 2: windows at rows and columns 0 and
  // 2). All zeros: each window's first element takes its gradient.
  using overlapping = bound<tf::max_pooling2d<3, 2>, tf::shape<5, 5, 1>>;
  const std::vector<float> g{1.f, 2.f, 4.f, 8.f};
  run_layer<overlapping, 1> o(std::vector<float>(25, 0.f), g);
  o.forward();
  o.backward();
  std::vector<float> expected(25, 0.f);
  expected[0] = 1.f;          // window (0, 0): element (0, 0)
  expected[2] = 2.f;          // window (0, 1): element (0, 2)
  expected[2 * 5] = 4.f;      // window (1, 0): element (2, 0)
  expected[2 * 5 + 2] = 8.f;  // window (1, 1): element (2, 2)
  CHECK(o.dx == expected);
  // A peak at the centre, shared by all four windows, sums their gradients.
  std::vector<float> peak(25, 0.f);
  peak[12] = 5.f;
  run_layer<overlapping, 1> q(peak, g);
  q.forward();
  CHECK(q.y == std::vector<float>(4, 5.f));
  q.backward();
  std::vector<float> summed(25, 0.f);
  summed[12] = 15.f;
  CHECK(q.dx == summed);
}

TEST_CASE("pooling_test: global average pooling averages each channel") {
  using layer = bound<tf::global_average_pooling2d, tf::shape<2, 3, 2>>;
  // Channel 0: 0..5, channel 1: 10 * (0..5).
  std::vector<float> x(2 * 12), dy{6.f, 12.f, -6.f, 3.f};
  for (int n = 0; n < 2; ++n)
    for (int p = 0; p < 6; ++p) {
      x[n * 12 + p * 2] = static_cast<float>(p + n);
      x[n * 12 + p * 2 + 1] = 10.f * static_cast<float>(p);
    }
  run_layer<layer, 2> r(x, dy);
  r.forward();
  CHECK(r.y[0] == doctest::Approx(2.5f));
  CHECK(r.y[1] == doctest::Approx(25.f));
  CHECK(r.y[2] == doctest::Approx(3.5f));
  CHECK(r.y[3] == doctest::Approx(25.f));
  r.backward();
  for (int n = 0; n < 2; ++n)
    for (int p = 0; p < 6; ++p) {
      CHECK(r.dx[n * 12 + p * 2] == doctest::Approx(dy[n * 2] / 6.f));
      CHECK(r.dx[n * 12 + p * 2 + 1] == doctest::Approx(dy[n * 2 + 1] / 6.f));
    }
}

TEST_CASE("pooling_test: zero padding surrounds the input with zeros and crops the gradient") {
  using layer = bound<tf::zero_padding2d<{1, 2}>, tf::shape<2, 3, 2>>;  // -> (4, 7, 2)
  constexpr int batch = 2;
  std::vector<float> x(batch * 12), dy(batch * 4 * 7 * 2);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
  for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<float>(i) * 0.5f;
  run_layer<layer, batch> r(x, dy);
  r.forward();
  for (int n = 0; n < batch; ++n)
    for (int h = 0; h < 4; ++h)
      for (int w = 0; w < 7; ++w)
        for (int c = 0; c < 2; ++c) {
          const bool inside = h >= 1 && h < 3 && w >= 2 && w < 5;
          const float expected = inside ? x[((n * 2 + h - 1) * 3 + w - 2) * 2 + c] : 0.f;
          CHECK(r.y[((n * 4 + h) * 7 + w) * 2 + c] == expected);
        }
  r.backward();
  for (int n = 0; n < batch; ++n)
    for (int h = 0; h < 2; ++h)
      for (int w = 0; w < 3; ++w)
        for (int c = 0; c < 2; ++c)
          CHECK(r.dx[((n * 2 + h) * 3 + w) * 2 + c] == dy[((n * 4 + h + 1) * 7 + w + 2) * 2 + c]);
}

// ---------------------------------------------------------------------------
// Finite differences through whole networks (the dense<4> before the layer
// under test has parameters, so the layer's input gradient is checked).

TEST_CASE("pooling_test: max pooling's gradients match finite differences") {
  check_gradients<image_net<tf::max_pooling2d<2>>>(logits_loss, image_batch());
  check_gradients<image_net<tf::max_pooling2d<3, 2, tf::padding::same>>>(logits_loss, image_batch());
  check_gradients<image_net<tf::max_pooling2d<{2, 3}, 1>>>(logits_loss, image_batch());
}

TEST_CASE("pooling_test: average pooling's gradients match finite differences") {
  check_gradients<image_net<tf::average_pooling2d<2>>>(logits_loss, image_batch());
  check_gradients<image_net<tf::average_pooling2d<3, 2, tf::padding::same>>>(logits_loss, image_batch());
  check_gradients<image_net<tf::average_pooling2d<{2, 3}, 1>>>(logits_loss, image_batch());
}

TEST_CASE("pooling_test: global average pooling's gradients match finite differences") {
  check_gradients<tf::sequential<tf::input<6, 7, 3>, tf::dense<4>, tf::global_average_pooling2d, tf::dense<3>>>(
      logits_loss, image_batch());
}

TEST_CASE("pooling_test: zero padding's gradients match finite differences") {
  check_gradients<image_net<tf::zero_padding2d<{1, 2}>>>(logits_loss, image_batch());
  check_gradients<image_net<tf::zero_padding2d<1>, tf::average_pooling2d<2>>>(logits_loss, image_batch());
}

// conv2d and depthwise_conv2d: Keras's shapes and parameter counts at compile
// time, forward values against a direct double-precision convolution (with
// TensorFlow's same-padding split), finite-difference gradients, and the
// kernel's row padding staying zero through training.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <typeflow/typeflow.hpp>

#include "../support/gradient_check.hpp"

namespace tf = typeflow;
using typeflow::testing::check_gradients;

namespace {

// A deterministic pseudo-random value in [-1, 1) for index i.
float wobble(std::uint64_t i, std::uint64_t salt = 0) {
  return 2.f * tf::random_stream{4321 + salt, 0}.uniform(i) - 1.f;
}

// ---------------------------------------------------------------------------
// Compile-time facts, by Keras's formulas.

// valid: (28 - 3) / 1 + 1 = 26
using mnist_first = tf::sequential<tf::input<28, 28, 1>, tf::conv2d<32, 3>>;
static_assert(mnist_first::output_shape == tf::shape<26, 26, 32>{});
static_assert(mnist_first::parameter_count == 3 * 3 * 1 * 32 + 32);
static_assert(mnist_first::layer<1>::flops_per_sample == 2ull * 26 * 26 * 32 * 3 * 3 * 1);

// same, stride 2: ceil(7 / 2) = 4, ceil(9 / 2) = 5
using same_strided = tf::sequential<tf::input<7, 9, 3>, tf::conv2d<4, 3, 2, tf::padding::same>>;
static_assert(same_strided::output_shape == tf::shape<4, 5, 4>{});
static_assert(same_strided::parameter_count == 3 * 3 * 3 * 4 + 4);
// total padding: rows (4 - 1) * 2 + 3 - 7 = 2 -> 1 top, 1 bottom; cols (5 - 1) * 2 + 3 - 9 = 2 -> 1, 1
static_assert(same_strided::layer<1>::geometry::rows.pad_before() == 1);
static_assert(same_strided::layer<1>::geometry::cols.pad_after() == 1);

// same, stride 1, kernel 4: total 3 -> 1 top, 2 bottom (the extra on the bottom)
using same_even = tf::sequential<tf::input<6, 6, 1>, tf::conv2d<2, 4, 1, tf::padding::same>>;
static_assert(same_even::output_shape == tf::shape<6, 6, 2>{});
static_assert(same_even::layer<1>::geometry::rows.pad_before() == 1);
static_assert(same_even::layer<1>::geometry::rows.pad_after() == 2);

// dilation 2, valid: effective kernel 2 * (3 - 1) + 1 = 5, (10 - 5) + 1 = 6
using dilated = tf::sequential<tf::input<10, 10, 2>, tf::conv2d<5, 3, 1, tf::padding::valid, tf::dilation<2>>>;
static_assert(dilated::output_shape == tf::shape<6, 6, 5>{});
static_assert(dilated::parameter_count == 3 * 3 * 2 * 5 + 5);

// non-square kernel and strides: rows (9 - 3) / 2 + 1 = 4, cols (11 - 5) / 1 + 1 = 7
using non_square = tf::sequential<tf::input<9, 11, 2>, tf::conv2d<6, tf::window{3, 5}, tf::window{2, 1}>>;
static_assert(non_square::output_shape == tf::shape<4, 7, 6>{});
static_assert(non_square::parameter_count == 3 * 5 * 2 * 6 + 6);
// floor: (10 - 3) / 2 + 1 = 4
static_assert(tf::sequential<tf::input<10, 10, 1>, tf::conv2d<1, 3, 2>>::output_shape == tf::shape<4, 4, 1>{});

// everything at once, without a bias: ceil(28 / 2) = 14
using no_bias = tf::sequential<tf::input<28, 28, 16>, tf::conv2d<64, tf::window{3, 5}, 2, tf::padding::same,
                                                                  tf::dilation<2>, tf::use_bias<false>>>;
static_assert(no_bias::output_shape == tf::shape<14, 14, 64>{});
static_assert(no_bias::parameter_count == 3 * 5 * 16 * 64);
static_assert(no_bias::layer<1>::params::count == 1);

// depthwise, multiplier 2: (kh, kw, C, M) and C * M biases, C * M output channels
using depthwise = tf::sequential<tf::input<8, 8, 3>,
                                 tf::depthwise_conv2d<3, 1, tf::padding::same, tf::depth_multiplier<2>>>;
static_assert(depthwise::output_shape == tf::shape<8, 8, 6>{});
static_assert(depthwise::parameter_count == 3 * 3 * 3 * 2 + 6);
static_assert(depthwise::layer<1>::flops_per_sample == 2ull * 8 * 8 * 3 * 2 * 3 * 3);
using depthwise_valid = tf::sequential<tf::input<9, 9, 4>, tf::depthwise_conv2d<tf::window{2, 3}, 2>>;
static_assert(depthwise_valid::output_shape == tf::shape<4, 4, 4>{});
static_assert(depthwise_valid::parameter_count == 2 * 3 * 4 + 4);

// Filters = 10 is stored with rows of 16 floats.
using ten_filters = tf::sequential<tf::input<5, 5, 2>, tf::conv2d<10, 3>>;
static_assert(std::tuple_element_t<0, ten_filters::layer<1>::params::tuple>::row_stride == 16);

// A relu, tanh or sigmoid after a convolution is fused.
using conv_relu = tf::sequential<tf::input<6, 7, 3>, tf::conv2d<4, 3>, tf::relu>;
static_assert(conv_relu::layer<1>::fused == tf::epilogue::relu);
static_assert(conv_relu::layer<2>::fused && conv_relu::layer<2>::output_aliases_input);
static_assert(tf::sequential<tf::input<6, 7, 3>, tf::depthwise_conv2d<3>, tf::tanh>::layer<2>::fused);
static_assert(!tf::sequential<tf::input<6, 7, 3>, tf::conv2d<4, 3>, tf::gelu>::layer<2>::fused);

// ---------------------------------------------------------------------------
// A direct convolution in double precision, channels last, with Keras's output
// lengths and TensorFlow's padding split (the smaller half before).
struct conv_spec {
  int kh, kw, sh = 1, sw = 1, dh = 1, dw = 1;
  bool same = false;
  int filters = 0;      // conv2d
  int multiplier = 0;   // depthwise_conv2d when > 0
};

int out_length(int in, int k, int s, int d, bool same) {
  const int ke = d * (k - 1) + 1;
  return same ? (in + s - 1) / s : (in - ke) / s + 1;
}
int pad_before(int in, int k, int s, int d, bool same) {
  if (!same) return 0;
  const int out = out_length(in, k, s, d, same);
  const int total = std::max((out - 1) * s + d * (k - 1) + 1 - in, 0);
  return total / 2;
}

// x (B, H, W, C); kernel (kh, kw, C, F) or (kh, kw, C, M), row-major; bias empty or (O).
std::vector<double> reference_conv(const std::vector<float>& x, int batch, int h, int w, int c,
                                   const std::vector<float>& kernel, const std::vector<float>& bias,
                                   const conv_spec& s) {
  const int oh = out_length(h, s.kh, s.sh, s.dh, s.same), ow = out_length(w, s.kw, s.sw, s.dw, s.same);
  const int top = pad_before(h, s.kh, s.sh, s.dh, s.same), left = pad_before(w, s.kw, s.sw, s.dw, s.same);
  const bool dw = s.multiplier > 0;
  const int per = dw ? s.multiplier : s.filters;  // the kernel's last axis
  const int o_count = dw ? c * s.multiplier : s.filters;
  std::vector<double> y(static_cast<std::size_t>(batch) * oh * ow * o_count, 0.0);
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < oh; ++i)
      for (int j = 0; j < ow; ++j)
        for (int o = 0; o < o_count; ++o) {
          double sum = bias.empty() ? 0.0 : bias[o];
          for (int p = 0; p < s.kh; ++p)
            for (int q = 0; q < s.kw; ++q) {
              const int r = i * s.sh + p * s.dh - top, col = j * s.sw + q * s.dw - left;
              if (r < 0 || r >= h || col < 0 || col >= w) continue;  // zero padding
              const float* px = &x[((static_cast<std::size_t>(b) * h + r) * w + col) * c];
              if (dw) {
                const int ch = o / s.multiplier, m = o % s.multiplier;
                sum += double(px[ch]) * kernel[((p * s.kw + q) * c + ch) * per + m];
              } else {
                for (int ch = 0; ch < c; ++ch) sum += double(px[ch]) * kernel[((p * s.kw + q) * c + ch) * per + o];
              }
            }
          y[((static_cast<std::size_t>(b) * oh + i) * ow + j) * o_count + o] = sum;
        }
  return y;
}

// Runs Net (input (H, W, C), the convolution at position 1, optionally an
// activation after it) on 3 samples and compares with the reference.
template <class Net>
void check_forward(const conv_spec& spec, bool relu_after) {
  using in = typename Net::input_shape_type;
  constexpr int h = in::template dim<0>, w = in::template dim<1>, c = in::template dim<2>, samples = 3;
  tf::model<Net> model{5};
  const bool dw = spec.multiplier > 0;
  // Copies: the arena may move when predict sets the model up for its batch size.
  auto kernel_view = model.parameter(dw ? "layers.1.depthwise_kernel" : "layers.1.kernel");
  for (std::size_t i = 0; i < kernel_view.size(); ++i) kernel_view[i] = wobble(i, 1);
  const std::vector<float> kernel(kernel_view.begin(), kernel_view.end());
  std::vector<float> bias;
  bool has_bias = false;
  for (const auto& p : model.parameter_specs()) has_bias |= p.name == "layers.1.bias";
  if (has_bias) {
    auto b = model.parameter("layers.1.bias");
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.5f * wobble(i, 2);
    bias.assign(b.begin(), b.end());
  }
  std::vector<float> x(static_cast<std::size_t>(samples) * in::size);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = wobble(i, 3);
  auto data = tf::data::from_tensor_slices<in>(x, std::vector<std::int32_t>(samples, 0)) | tf::data::batch<2>;
  const std::vector<float> y = model.predict(data);
  std::vector<double> expected =
      reference_conv(x, samples, h, w, c, kernel, bias, spec);
  REQUIRE(y.size() == expected.size());
  REQUIRE(y.size() == samples * Net::output_shape_type::size);
  int bad = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double want = relu_after ? std::max(expected[i], 0.0) : expected[i];
    if (std::fabs(y[i] - want) > 1e-4 * (1.0 + std::fabs(want))) {
      if (++bad <= 5) INFO("y[" << i << "] = " << y[i] << ", expected " << want);
      CHECK(y[i] == doctest::Approx(want).epsilon(1e-4));
    }
  }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("conv2d names itself as it was written") {
  CHECK(tf::conv2d<32, 3>::type_name() == "conv2d<32, 3>");
  CHECK(tf::conv2d<64, tf::window{3, 5}, 2, tf::padding::same, tf::dilation<2>>::type_name() ==
        "conv2d<64, {3, 5}, 2, same, ...>");
  CHECK(tf::depthwise_conv2d<3, 2>::type_name() == "depthwise_conv2d<3, 2>");
}

TEST_CASE("conv2d forward matches a direct convolution, valid padding") {
  check_forward<tf::sequential<tf::input<6, 7, 3>, tf::conv2d<5, 3>>>({.kh = 3, .kw = 3, .filters = 5}, false);
}

TEST_CASE("conv2d forward matches a direct convolution, same padding with stride 2") {
  check_forward<tf::sequential<tf::input<7, 8, 3>, tf::conv2d<4, 3, 2, tf::padding::same>>>(
      {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .same = true, .filters = 4}, false);
  // An even kernel: the extra padding row and column go on the bottom and right.
  check_forward<tf::sequential<tf::input<6, 5, 2>, tf::conv2d<3, 4, 1, tf::padding::same>>>(
      {.kh = 4, .kw = 4, .same = true, .filters = 3}, false);
}

TEST_CASE("conv2d forward matches a direct convolution, dilation and non-square windows") {
  check_forward<tf::sequential<tf::input<9, 10, 2>, tf::conv2d<3, 3, 1, tf::padding::same, tf::dilation<2>>>>(
      {.kh = 3, .kw = 3, .dh = 2, .dw = 2, .same = true, .filters = 3}, false);
  check_forward<tf::sequential<tf::input<9, 11, 2>, tf::conv2d<6, tf::window{3, 2}, tf::window{2, 1},
                                                                 tf::padding::valid, tf::dilation<tf::window{1, 3}>>>>(
      {.kh = 3, .kw = 2, .sh = 2, .sw = 1, .dh = 1, .dw = 3, .filters = 6}, false);
  check_forward<tf::sequential<tf::input<8, 7, 3>,
                               tf::conv2d<10, tf::window{2, 3}, 3, tf::padding::same, tf::use_bias<false>>>>(
      {.kh = 2, .kw = 3, .sh = 3, .sw = 3, .same = true, .filters = 10}, false);
}

TEST_CASE("conv2d with a fused relu matches a direct convolution followed by relu") {
  using net = tf::sequential<tf::input<6, 7, 3>, tf::conv2d<20, 3, 1, tf::padding::same>, tf::relu>;
  static_assert(net::layer<2>::fused);
  check_forward<net>({.kh = 3, .kw = 3, .same = true, .filters = 20}, true);
}

TEST_CASE("depthwise_conv2d forward matches a direct convolution") {
  check_forward<tf::sequential<tf::input<7, 6, 3>, tf::depthwise_conv2d<3>>>({.kh = 3, .kw = 3, .multiplier = 1},
                                                                            false);
  check_forward<tf::sequential<tf::input<7, 6, 3>,
                               tf::depthwise_conv2d<3, 2, tf::padding::same, tf::depth_multiplier<2>>>>(
      {.kh = 3, .kw = 3, .sh = 2, .sw = 2, .same = true, .multiplier = 2}, false);
  check_forward<tf::sequential<tf::input<8, 9, 4>, tf::depthwise_conv2d<tf::window{2, 3}, 1, tf::padding::same,
                                                                        tf::dilation<2>, tf::depth_multiplier<3>>,
                               tf::relu>>({.kh = 2, .kw = 3, .dh = 2, .dw = 2, .same = true, .multiplier = 3}, true);
}

// ---------------------------------------------------------------------------
// Gradients: a dense before the convolution gives it an input gradient to
// write (backward-data), and the dense's kernel gradient checks it.
namespace {

constexpr int batch_size = 4;
using image = tf::data::tensor_value<float, tf::shape<6, 7, 3>>;
using class_label = tf::data::tensor_value<std::int32_t, tf::shape<>>;

tf::data::batch_of<batch_size, image, class_label> image_batch() {
  tf::data::batch_of<batch_size, image, class_label> b;
  for (std::size_t i = 0; i < b.features.size(); ++i) b.features[i] = wobble(i, 7);
  for (int i = 0; i < batch_size; ++i) b.labels[i] = i % 3;
  b.valid = batch_size;
  return b;
}

const tf::losses::sparse_categorical_crossentropy logits_loss{.from_logits = true};

template <class... Conv>
using around = tf::sequential<tf::input<6, 7, 3>, tf::dense<3>, Conv..., tf::flatten, tf::dense<3>>;

}  // namespace

TEST_CASE("conv2d's gradients match finite differences, valid padding") {
  check_gradients<around<tf::conv2d<4, 3>, tf::tanh>>(logits_loss, image_batch());
  // The first layer: no input gradient to write.
  check_gradients<tf::sequential<tf::input<6, 7, 3>, tf::conv2d<4, 3, 1, tf::padding::same>, tf::tanh, tf::flatten,
                                 tf::dense<3>>>(logits_loss, image_batch());
}

TEST_CASE("conv2d's gradients match finite differences, same padding with stride 2") {
  check_gradients<around<tf::conv2d<4, 3, 2, tf::padding::same>, tf::sigmoid>>(logits_loss, image_batch());
  check_gradients<around<tf::conv2d<5, tf::window{2, 3}, tf::window{2, 1}, tf::padding::same, tf::use_bias<false>>,
                         tf::tanh>>(logits_loss, image_batch());
}

TEST_CASE("conv2d's gradients match finite differences, dilation") {
  check_gradients<around<tf::conv2d<4, 3, 1, tf::padding::same, tf::dilation<2>>, tf::tanh>>(logits_loss,
                                                                                             image_batch());
  check_gradients<around<tf::conv2d<3, 2, 1, tf::padding::valid, tf::dilation<tf::window{2, 3}>>, tf::tanh>>(
      logits_loss, image_batch());
}

TEST_CASE("depthwise_conv2d's gradients match finite differences") {
  check_gradients<around<tf::depthwise_conv2d<3, 1, tf::padding::same>, tf::tanh>>(logits_loss, image_batch());
  check_gradients<around<tf::depthwise_conv2d<3, 2, tf::padding::same, tf::depth_multiplier<2>>, tf::tanh>>(
      logits_loss, image_batch());
  check_gradients<around<tf::depthwise_conv2d<2, 1, tf::padding::valid, tf::dilation<2>>, tf::tanh>>(logits_loss,
                                                                                                     image_batch());
}

// (A relu between them would put many of the 672 pre-activations per sample
// within the finite difference's step of its kink; its fused forward is
// checked above, and its backward is the activation's own.)
TEST_CASE("two convolutions in a row match finite differences") {
  check_gradients<tf::sequential<tf::input<6, 7, 3>, tf::conv2d<4, 3, 1, tf::padding::same>, tf::sigmoid,
                                 tf::conv2d<5, 3, 2>, tf::tanh, tf::flatten, tf::dense<3>>>(logits_loss,
                                                                                             image_batch());
}

// ---------------------------------------------------------------------------
TEST_CASE("conv2d kernel padding stays zero through training steps") {
  // Filters = 10 is stored at a row stride of 16; depthwise multiplier 1 at 16.
  using net = tf::sequential<tf::input<6, 7, 3>, tf::dense<3>, tf::conv2d<10, 3>, tf::relu,
                             tf::depthwise_conv2d<2, 1, tf::padding::same>, tf::flatten, tf::dense<3>>;
  tf::model<net> model{11};
  model.compile(tf::optimizers::adam{.learning_rate = 1e-2f}, logits_loss);
  const auto batch = image_batch();
  const float before = model.parameter("layers.2.kernel")[0];
  for (int step = 0; step < 3; ++step) model.train_on_batch(batch);
  CHECK(model.parameter("layers.2.kernel")[0] != before);  // it trained
  for (const char* name : {"layers.2.kernel", "layers.4.depthwise_kernel"}) {
    INFO(name);
    const auto weights = model.parameter(name);
    const auto grads = model.gradient(name);
    REQUIRE(weights.row_stride() == 16);
    REQUIRE(weights.row_length() < weights.row_stride());
    const std::size_t rows = weights.size() / weights.row_length();
    int nonzero = 0, padding_nonzero = 0;
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t j = 0; j < weights.row_stride(); ++j) {
        const std::size_t at = r * weights.row_stride() + j;
        if (j < weights.row_length()) {
          nonzero += grads.storage()[at] != 0.f;
        } else {
          padding_nonzero += weights.storage()[at] != 0.f;
          padding_nonzero += grads.storage()[at] != 0.f;
        }
      }
    CHECK(nonzero > 0);
    CHECK(padding_nonzero == 0);
  }
}

TEST_CASE("conv2d writes its gradients rather than adding to them") {
  // Two steps at learning rate 0 on the same batch leave the same gradient.
  using net = tf::sequential<tf::input<6, 7, 3>, tf::dense<3>, tf::conv2d<4, 3>, tf::tanh,
                             tf::depthwise_conv2d<3, 1, tf::padding::same>, tf::flatten, tf::dense<3>>;
  tf::model<net> model{3};
  model.compile(tf::optimizers::sgd{.learning_rate = 0.f}, logits_loss);
  const auto batch = image_batch();
  model.train_on_batch(batch);
  std::vector<std::vector<float>> first;
  for (const auto& p : model.parameter_specs())
    first.emplace_back(model.gradient(p.name).begin(), model.gradient(p.name).end());
  model.train_on_batch(batch);
  std::size_t i = 0;
  for (const auto& p : model.parameter_specs()) {
    INFO(p.name);
    const std::vector<float> second(model.gradient(p.name).begin(), model.gradient(p.name).end());
    CHECK(second == first[i++]);
  }
}

TEST_CASE("conv2d computes in the policy's 16 bits and stores float32 under a mixed policy") {
  // The dense before it stores float32 for it; the dense after it reads float32.
  using net = tf::sequential<tf::input<6, 7, 3>, tf::dense<4>, tf::conv2d<4, 3>, tf::relu,
                             tf::depthwise_conv2d<3, 1, tf::padding::same>, tf::flatten, tf::dense<8>,
                             tf::dense<3, tf::float32>>;
  using bf = net::under<tf::mixed_bfloat16>;
  static_assert(std::is_same_v<bf::layer<1>::output_dtype, tf::float32>);
  static_assert(std::is_same_v<bf::layer<2>::compute_dtype, tf::bfloat16>);
  static_assert(std::is_same_v<bf::layer<2>::output_dtype, tf::float32>);
  static_assert(std::is_same_v<bf::layer<4>::compute_dtype, tf::bfloat16>);
  static_assert(std::is_same_v<net::under<tf::mixed_float16>::layer<2>::compute_dtype, tf::float16>);
  // A dtype option keeps one in float32, as Keras's dtype="float32" (an output layer's).
  using head = tf::sequential<tf::input<6, 7, 3>, tf::conv2d<4, 3, 1, tf::padding::valid, tf::float32>,
                              tf::depthwise_conv2d<3, 1, tf::padding::valid, tf::float32>>;
  static_assert(std::is_same_v<head::under<tf::mixed_bfloat16>::layer<1>::compute_dtype, tf::float32>);
  static_assert(std::is_same_v<head::under<tf::mixed_bfloat16>::layer<2>::compute_dtype, tf::float32>);
  static_assert(sizeof(tf::model<head, tf::mixed_bfloat16>) > 0);  // the loss receives float32
  static_assert(std::is_same_v<bf::layer<3>::output_dtype, tf::float32> && bf::layer<3>::fused);
  static_assert(std::is_same_v<bf::layer<4>::output_dtype, tf::float32>);
  static_assert(std::is_same_v<bf::layer<6>::compute_dtype, tf::bfloat16>);
  const auto batch = image_batch();
  // Both ways to 16-bit products (bf16 primitives where the CPU has them,
  // else the same as emulated) write gradients bfloat16 holds.
  for (auto choice : {tf::backend::cpu::products_16bit::automatic, tf::backend::cpu::products_16bit::emulated}) {
    tf::backend::cpu::set_products_16bit(choice);
    tf::model<net, tf::mixed_bfloat16> model{2};
    model.compile(tf::optimizers::adam{.learning_rate = 1e-2f}, logits_loss);
    const double first = model.train_on_batch(batch);
    for (const char* name : {"layers.2.kernel", "layers.2.bias", "layers.4.depthwise_kernel", "layers.4.bias"}) {
      INFO(name);
      std::size_t nonzero = 0, outside = 0;
      for (float g : model.gradient(name)) {
        nonzero += g != 0.f;
        outside += (std::bit_cast<std::uint32_t>(g) & 0xffffu) != 0;
      }
      CHECK(outside == 0);
      CHECK(nonzero > 0);
    }
    double last = first;
    for (int step = 0; step < 20; ++step) last = model.train_on_batch(batch);
    CHECK(std::isfinite(last));
    CHECK(last < first);
  }
  tf::backend::cpu::set_products_16bit(tf::backend::cpu::products_16bit::automatic);
  // float16 is emulated everywhere, under loss scaling.
  tf::model<net, tf::mixed_float16> half{2};
  half.compile(tf::optimizers::adam{.learning_rate = 1e-2f}, logits_loss);
  const double first = half.train_on_batch(batch);
  double last = first;
  for (int step = 0; step < 20; ++step) last = half.train_on_batch(batch);
  CHECK(std::isfinite(last));
  CHECK(last < first);
}

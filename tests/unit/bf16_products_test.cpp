// bfloat16 products on the CPU: oneDNN's native bf16 matmuls (AVX512-BF16,
// AMX) against the emulated path (operands rounded, product in float32).
// Both compute a bf16 product with float32 accumulation, so they agree up to
// the order of the sums; the comparisons skip on CPUs without native bf16.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <typeflow/typeflow.hpp>
#include <typeflow/backend/cpu/attention.hpp>
#include <typeflow/backend/cpu/matmul.hpp>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tf = typeflow;

namespace {

constexpr int features = 48;
using feature_row = tf::data::tensor_value<float, tf::shape<features>>;
using label = tf::data::tensor_value<std::int32_t, tf::shape<>>;

// Every path through dense: a float32 input converted (layer 1), a bf16 input
// read as it is (layers 3 and 5), bf16 outputs written by the matmul with the
// epilogue fused (1, 3), a float32 output wider than the input, before
// layer_norm (5), and a float32 dense (7).
using net = tf::sequential<tf::input<features>, tf::dense<64>, tf::relu, tf::dense<24>, tf::gelu, tf::dense<96>,
                           tf::layer_norm, tf::dense<10, tf::float32>>;

template <int N>
tf::data::batch_of<N, feature_row, label> toy_batch(std::uint64_t seed) {
  tf::data::batch_of<N, feature_row, label> b;
  const tf::random_stream rng{seed, 0};
  for (int i = 0; i < N; ++i) {
    const int c = static_cast<int>((seed + i * 7u) % 10);
    b.labels[i] = c;
    for (int j = 0; j < features; ++j)
      b.features[i * features + j] = (j % 10 == c ? 1.f : 0.f) + 0.5f * (2.f * rng.uniform(i * features + j) - 1.f);
  }
  b.valid = N;
  return b;
}

struct run_result {
  std::vector<double> losses;
  std::vector<std::vector<float>> first_gradients;  // after step 1, per dense kernel
  std::vector<float> parameters;
};

const std::vector<std::string> kernels{"layers.1.kernel", "layers.3.kernel", "layers.5.kernel", "layers.7.kernel"};

run_result train(tf::backend::cpu::products_16bit choice, int steps) {
  tf::backend::cpu::set_products_16bit(choice);
  tf::model<net, tf::mixed_bfloat16> model{11};
  model.compile(tf::optimizers::adam{.learning_rate = 3e-3},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  run_result r;
  for (int step = 0; step < steps; ++step) {
    r.losses.push_back(model.train_on_batch(toy_batch<64>(step % 4)));
    if (step == 0)
      for (const auto& name : kernels) {
        const auto g = model.gradient(name);
        r.first_gradients.emplace_back(g.begin(), g.end());
      }
  }
  const auto p = model.parameter_region();
  r.parameters.assign(p.begin(), p.end());
  tf::backend::cpu::set_products_16bit(tf::backend::cpu::products_16bit::automatic);
  return r;
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

// Whether these cases can compare the two paths here, saying why not.
bool native_path_on() {
  if (!tf::backend::cpu::bf16_products_available()) {
    MESSAGE("skipped: oneDNN has no native bf16 matmul on this CPU (it needs avx512_bf16 or amx_bf16)");
    return false;
  }
  if (!tf::backend::cpu::native_bf16_products()) {
    MESSAGE("skipped: TYPEFLOW_CPU_16BIT_PRODUCTS=emulated turns the native path off in this run");
    return false;
  }
  return true;
}

bool representable_in_bf16(float x) { return (std::bit_cast<std::uint32_t>(x) & 0xffffu) == 0; }

}  // namespace

TEST_CASE("native bf16 products give the emulated path's loss and gradients up to the order of the sums") {
  if (!native_path_on()) return;
  const auto native = train(tf::backend::cpu::products_16bit::automatic, 1);
  const auto emulated = train(tf::backend::cpu::products_16bit::emulated, 1);
  CHECK(std::fabs(native.losses[0] - emulated.losses[0]) < 2e-3 * emulated.losses[0]);
  for (std::size_t k = 0; k < kernels.size(); ++k) {
    const double d = relative_difference(native.first_gradients[k], emulated.first_gradients[k]);
    INFO(kernels[k] << ": relative difference " << d);
    CHECK(d < 2e-2);
  }
  // The 16-bit layers' gradients are still bf16 values; the float32 head's are not.
  for (std::size_t k = 0; k < 3; ++k)
    for (float g : native.first_gradients[k]) REQUIRE(representable_in_bf16(g));
  std::size_t outside = 0;
  for (float g : native.first_gradients[3]) outside += !representable_in_bf16(g);
  CHECK(outside > native.first_gradients[3].size() / 2);
}

TEST_CASE("native bf16 products train as the emulated path does") {
  if (!native_path_on()) return;
  const auto native = train(tf::backend::cpu::products_16bit::automatic, 40);
  const auto emulated = train(tf::backend::cpu::products_16bit::emulated, 40);
  MESSAGE("loss after 40 steps: native " << native.losses.back() << ", emulated " << emulated.losses.back());
  CHECK(native.losses.back() < 0.3 * native.losses.front());
  CHECK(std::fabs(native.losses.back() - emulated.losses.back()) < 0.1 * emulated.losses.back() + 0.02);
  CHECK(relative_difference(native.parameters, emulated.parameters) < 0.05);
}

namespace {
// A language model's head: tied_logits computes a 16-bit product and hands
// float32 logits to the loss; its gradient reaches the shared matrix.
constexpr int vocab = 300, width = 32, length = 8;
using lm = tf::sequential<tf::typed_input<tf::int32, length>, tf::embedding<vocab, width>, tf::dense<width>, tf::gelu,
                          tf::layer_norm, tf::tied_logits>;
// With attention: its two projections are 16-bit products too.
using attention_lm =
    tf::sequential<tf::typed_input<tf::int32, length>, tf::embedding<vocab, width>, tf::positional_embedding<length>,
                   tf::residual<tf::layer_norm, tf::causal_self_attention<2>>,
                   tf::residual<tf::layer_norm, tf::dense<2 * width>, tf::gelu, tf::dense<width>>, tf::layer_norm,
                   tf::tied_logits>;
using tokens = tf::data::tensor_value<std::int32_t, tf::shape<length>>;

tf::data::batch_of<16, tokens, tokens> token_batch(std::uint64_t salt) {
  tf::data::batch_of<16, tokens, tokens> b;
  for (std::size_t i = 0; i < b.features.size(); ++i) {
    b.features[i] = static_cast<std::int32_t>(tf::random_stream{salt, 1}.uniform(i) * vocab);
    b.labels[i] = (b.features[i] * 7 + 3) % vocab;
  }
  b.valid = 16;
  return b;
}

struct lm_result {
  std::vector<double> losses;
  std::vector<float> first_table_gradient, first_update, logits;
};

// One SGD step (whose update is -lr times every gradient), then Adam.
template <class Net>
lm_result train_lm(tf::backend::cpu::products_16bit choice, int steps) {
  tf::backend::cpu::set_products_16bit(choice);
  tf::model<Net, tf::mixed_bfloat16> model{5};
  lm_result r;
  const auto before = model.parameter_region();
  const std::vector<float> initial(before.begin(), before.end());
  model.compile(tf::optimizers::sgd{.learning_rate = 0.5}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  r.losses.push_back(model.train_on_batch(token_batch(0)));
  const auto g = model.gradient("layers.1.embeddings");
  r.first_table_gradient.assign(g.begin(), g.end());
  const auto after = model.parameter_region();
  for (std::size_t i = 0; i < initial.size(); ++i) r.first_update.push_back(after[i] - initial[i]);
  model.compile(tf::optimizers::adam{.learning_rate = 1e-2},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  for (int step = 1; step < steps; ++step) r.losses.push_back(model.train_on_batch(token_batch(step % 4)));
  const auto b = token_batch(0);
  const std::vector<std::int32_t> ids(b.features.begin(), b.features.end());
  auto data = tf::data::from_tensor_slices<tf::shape<length>, tf::shape<length>>(ids, ids) | tf::data::batch<16>;
  r.logits = model.predict(data);
  tf::backend::cpu::set_products_16bit(tf::backend::cpu::products_16bit::automatic);
  return r;
}
}  // namespace

TEST_CASE("tied_logits: native bf16 products match the emulated path and keep float32 logits") {
  if (!native_path_on()) return;
  const auto native = train_lm<lm>(tf::backend::cpu::products_16bit::automatic, 1);
  const auto emulated = train_lm<lm>(tf::backend::cpu::products_16bit::emulated, 1);
  CHECK(std::fabs(native.losses[0] - emulated.losses[0]) < 2e-3 * emulated.losses[0]);
  CHECK(relative_difference(native.first_table_gradient, emulated.first_table_gradient) < 2e-2);
  CHECK(relative_difference(native.first_update, emulated.first_update) < 2e-2);
  // The logits are a float32 result: most are not bf16 values.
  std::size_t outside = 0;
  for (float z : native.logits) outside += !representable_in_bf16(z);
  CHECK(outside > native.logits.size() / 2);
  const auto trained = train_lm<lm>(tf::backend::cpu::products_16bit::automatic, 60);
  MESSAGE("language model loss: " << trained.losses.front() << " -> " << trained.losses.back());
  CHECK(trained.losses.back() < 0.3 * trained.losses.front());
}

TEST_CASE("causal_self_attention: 16-bit projections, native and emulated, agree and train") {
  if (!native_path_on()) return;
  const auto native = train_lm<attention_lm>(tf::backend::cpu::products_16bit::automatic, 1);
  const auto emulated = train_lm<attention_lm>(tf::backend::cpu::products_16bit::emulated, 1);
  CHECK(std::fabs(native.losses[0] - emulated.losses[0]) < 2e-3 * emulated.losses[0]);
  // Every parameter's first update is -lr times its gradient: all of them agree.
  CHECK(relative_difference(native.first_update, emulated.first_update) < 2e-2);
  const auto trained = train_lm<attention_lm>(tf::backend::cpu::products_16bit::automatic, 60);
  const auto trained_emulated = train_lm<attention_lm>(tf::backend::cpu::products_16bit::emulated, 60);
  MESSAGE("attention model loss: native " << trained.losses.front() << " -> " << trained.losses.back()
                                          << ", emulated -> " << trained_emulated.losses.back());
  CHECK(trained.losses.back() < 0.3 * trained.losses.front());
  CHECK(std::fabs(trained.losses.back() - trained_emulated.losses.back()) < 0.2 * trained_emulated.losses.back() + 0.05);
}

TEST_CASE("under mixed_bfloat16 attention's projections write gradients bfloat16 can hold, on both paths") {
  using bound = attention_lm::under<tf::mixed_bfloat16>;
  static_assert(std::is_same_v<bound::layer<3>::child<1>::compute_dtype, tf::bfloat16>);
  static_assert(std::is_same_v<bound::layer<3>::child<1>::output_dtype, tf::float32>);  // added to the skip path
  for (auto choice : {tf::backend::cpu::products_16bit::automatic, tf::backend::cpu::products_16bit::emulated}) {
    tf::backend::cpu::set_products_16bit(choice);
    tf::model<attention_lm, tf::mixed_bfloat16> model{5};
    model.compile(tf::optimizers::sgd{.learning_rate = 0.1},
                  tf::losses::sparse_categorical_crossentropy{.from_logits = true});
    model.train_on_batch(token_batch(1));
    for (const char* name : {"layers.3.attn.qkv.kernel", "layers.3.attn.proj.kernel", "layers.3.attn.qkv.bias"}) {
      INFO(name);
      std::size_t nonzero = 0, outside = 0;
      for (float g : model.gradient(name)) {
        nonzero += g != 0.f;
        outside += !representable_in_bf16(g);
      }
      CHECK(outside == 0);
      CHECK(nonzero > model.gradient(name).size() / 4);
    }
  }
  tf::backend::cpu::set_products_16bit(tf::backend::cpu::products_16bit::automatic);
}

TEST_CASE("products_16bit::emulated and the environment variable turn the native path off") {
  using tf::backend::cpu::products_16bit;
  // The suite may run under TYPEFLOW_CPU_16BIT_PRODUCTS=emulated (tests/CMakeLists.txt).
  const char* given = std::getenv("TYPEFLOW_CPU_16BIT_PRODUCTS");
  const std::string saved = given ? given : "";
  ::unsetenv("TYPEFLOW_CPU_16BIT_PRODUCTS");
  tf::backend::cpu::set_products_16bit(products_16bit::emulated);
  CHECK_FALSE(tf::backend::cpu::native_bf16_products());
  tf::backend::cpu::set_products_16bit(products_16bit::automatic);
  CHECK(tf::backend::cpu::native_bf16_products() == tf::backend::cpu::bf16_products_available());
  ::setenv("TYPEFLOW_CPU_16BIT_PRODUCTS", "emulated", 1);
  CHECK_FALSE(tf::backend::cpu::native_bf16_products());
  if (given) ::setenv("TYPEFLOW_CPU_16BIT_PRODUCTS", saved.c_str(), 1);
  else ::unsetenv("TYPEFLOW_CPU_16BIT_PRODUCTS");
}

namespace {
// Layer 1 of Net under mixed_bfloat16, its executor driven on buffers of its
// own, native or emulated.
template <class Net, int Batch>
struct layer_rig {
  using layer = typename Net::template under<tf::mixed_bfloat16>::template layer<1>;
  using spec = typename Net::template spec<1>;
  static constexpr std::size_t in_count = Batch * layer::input_shape::size;
  static constexpr std::size_t out_count = Batch * layer::output_shape::size;
  tf::backend::cpu::context context;
  std::vector<float> in, out, d_in, d_out, params, grads;
  std::vector<std::byte> workspace, scratch;
  tf::run_state run{.training = true, .seed = 1, .step = 1};

  explicit layer_rig(bool native, float weight_scale = 0.2f)
      : in(in_count), out(out_count), d_in(in_count), d_out(out_count), params(layer::params::floats),
        grads(layer::params::floats),
        workspace(Batch * layer::workspace_bytes_per_sample + layer::workspace_bytes_per_step + 64),
        scratch(Batch * layer::scratch_bytes_per_sample + layer::scratch_bytes_per_step + 64) {
    context.native_bf16 = native;
    for (std::size_t i = 0; i < in_count; ++i) in[i] = tf::random_stream{1, 0}.uniform(i) - 0.5f;
    for (std::size_t i = 0; i < out_count; ++i) d_out[i] = 1e-2f * (tf::random_stream{2, 0}.uniform(i) - 0.5f);
    for (std::size_t i = 0; i < params.size(); ++i)
      params[i] = weight_scale * (tf::random_stream{3, 0}.uniform(i) - 0.5f);
  }
  // Forward, then backward; whether the bf16 primitives (or, for attention,
  // the bf16 per-head kernels) ran.
  bool step() {
    tf::layer_io<tf::cpu> io;
    io.in = in.data();
    io.out = out.data();
    io.d_in = d_in.data();
    io.d_out = d_out.data();
    io.params = params.data();
    io.grads = grads.data();
    io.workspace = align(workspace);
    io.scratch = align(scratch);
    io.context = &context;
    io.run = &run;
    tf::executor<spec, layer, Batch, tf::cpu> executor(io);
    tf::backend::cpu::scratchpad pad(executor.scratchpad_bytes());
    executor.bind(pad.data());
    executor.forward();
    executor.backward();
    if constexpr (requires { executor.native_heads(); }) return executor.native_heads();
    else return executor.native_bf16();
  }
  static std::byte* align(std::vector<std::byte>& v) {
    const auto address = reinterpret_cast<std::uintptr_t>(v.data());
    return v.data() + ((64 - address % 64) % 64);
  }
};

template <class Net>
void check_conv_paths() {
  layer_rig<Net, 8> native(true), emulated(false);
  REQUIRE(native.step());
  REQUIRE_FALSE(emulated.step());
  INFO(Net::template spec<1>::type_name());
  CHECK(relative_difference(native.out, emulated.out) < 1e-2);
  CHECK(relative_difference(native.d_in, emulated.d_in) < 1e-2);
  CHECK(relative_difference(native.grads, emulated.grads) < 1e-2);
  // Both paths round the output, the input gradient and the parameters' gradients to bf16.
  for (const auto* rig : {&native, &emulated}) {
    std::size_t outside = 0;
    for (float v : rig->out) outside += !representable_in_bf16(v);
    for (float v : rig->d_in) outside += !representable_in_bf16(v);
    for (float v : rig->grads) outside += !representable_in_bf16(v);
    CHECK(outside == 0);
  }
}
}  // namespace

TEST_CASE("conv2d and depthwise_conv2d: native bf16 convolutions match the emulated path") {
  if (!native_path_on()) return;
  check_conv_paths<tf::sequential<tf::input<9, 9, 16>, tf::conv2d<32, 3>>>();
  check_conv_paths<tf::sequential<tf::input<9, 10, 8>, tf::conv2d<16, tf::window{3, 5}, 2, tf::padding::same>>>();
  check_conv_paths<tf::sequential<tf::input<9, 9, 16>, tf::depthwise_conv2d<3, 1, tf::padding::same>>>();
}

namespace {
// C = A · B (+ bias, relu) with bf16 A and B, against the same sums in
// double; B stored (k, n) or, transposed, (n, k) with padded rows.
void check_wide_product(bool transpose_b, bool bf16_result) {
  using bf16_t = tf::bfloat16::value_type;
  constexpr int m = 40, n = 1040, k = 72, ldb_t = 80;  // n is no multiple of 32: the parts differ in width
  std::vector<float> a(m * k), b(transpose_b ? n * ldb_t : k * n, 0.f), bias(n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = tf::random_stream{4, 0}.uniform(i) - 0.5f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = tf::random_stream{5, 0}.uniform(i) - 0.5f;
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = 0.1f * (tf::random_stream{6, 0}.uniform(i) - 0.5f);
  std::vector<bf16_t> a16(a.size()), b16(b.size());
  tf::precision::from_float<tf::bfloat16>(a.data(), a16.data(), a.size());
  tf::precision::from_float<tf::bfloat16>(b.data(), b16.data(), b.size());
  tf::precision::round_in_place<tf::bfloat16>(a.data(), a.size());
  tf::precision::round_in_place<tf::bfloat16>(b.data(), b.size());

  tf::backend::cpu::context context;
  tf::backend::cpu::matmul product(context, {m, n, k, false, transpose_b, 0, transpose_b ? ldb_t : 0}, true,
                                   tf::epilogue::relu, false, 1.f, {true, bf16_result});
  INFO("transpose_b " << transpose_b << ", bf16 result " << bf16_result << ", " << product.parts() << " parts, "
                      << product.implementation());
#ifdef _OPENMP
  if (omp_get_max_threads() >= 2) CHECK(product.parts() >= 2);  // the case under test
#endif
  tf::backend::cpu::scratchpad pad(product.scratchpad_bytes());
  std::vector<float> c(m * n, -7.f);
  std::vector<bf16_t> c16(m * n);
  product.bind(a16.data(), b16.data(), bias.data(), bf16_result ? static_cast<void*>(c16.data()) : c.data(), pad.data());
  product.run();
  if (bf16_result) tf::precision::to_float<tf::bfloat16>(c16.data(), c.data(), c.size());
  double worst = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double sum = bias[j];
      for (int p = 0; p < k; ++p) sum += double(a[i * k + p]) * (transpose_b ? b[j * ldb_t + p] : b[p * n + j]);
      worst = std::max(worst, std::fabs(std::max(sum, 0.0) - c[i * n + j]));
    }
  CHECK(worst < (bf16_result ? 2e-2 : 1e-4));  // a bf16 result holds 8 bits: sums up to ~3 round by up to 1e-2
}
}  // namespace

namespace {
// causal_self_attention's per-head products: bf16 kernels against float32
// products of the same rounded operands (where the CPU has AVX512-BF16).
// Weights large enough for peaked attention.
template <int T, int D, int Heads, int Batch, class... Options>
void check_attention_heads(bool compare_native) {
  using Net = tf::sequential<tf::input<T, D>, tf::causal_self_attention<Heads, Options...>>;
  using rig = layer_rig<Net, Batch>;
  using layer = typename rig::layer;
  INFO("T " << T << ", D " << D << ", heads " << Heads << ", batch " << Batch << ", dropout " << layer::with_dropout);
  // Each path keeps P as bf16 values (the operand of P v), and P is no
  // uniform average.
  auto check_probabilities = [](rig& r) {
    const auto* p = reinterpret_cast<const float*>(rig::align(r.workspace) + Batch * layer::qkv_bytes);
    std::size_t outside = 0;
    float largest = 0.f;
    for (int pair = 0; pair < Batch * Heads; ++pair)
      for (int i = 0; i < T; ++i)
        for (int j = 0; j <= i; ++j) {
          const float v = p[(static_cast<std::size_t>(pair) * T + i) * layer::score_stride + j];
          outside += !representable_in_bf16(v);
          largest = std::max(largest, v * (i + 1));
        }
    CHECK(outside == 0);
    CHECK(largest > 2.f);  // some weight is twice the row's mean
  };
  rig emulated(false, 1.5f);
  REQUIRE_FALSE(emulated.step());
  check_probabilities(emulated);
  if (!compare_native) return;
  rig native(true, 1.5f);
  REQUIRE(native.step());
  check_probabilities(native);
  const double out = relative_difference(native.out, emulated.out), d_in = relative_difference(native.d_in, emulated.d_in),
               grads = relative_difference(native.grads, emulated.grads);
  MESSAGE("native against emulated, relative: out " << out << ", d_x " << d_in << ", gradients " << grads);
  CHECK(out < 5e-3);
  CHECK(d_in < 5e-3);
  CHECK(grads < 5e-3);
}
}  // namespace

TEST_CASE("causal_self_attention: bf16 per-head products match float32 products of the rounded operands") {
  bool native = native_path_on();
  if (native && !tf::detail::attention_kernels::bf16_kernels) {
    MESSAGE("skipped: this build has no AVX512-BF16 per-head kernels (compiled without -mavx512bf16)");
    native = false;
  }
  if (!native) MESSAGE("only the emulated path is checked here");
  check_attention_heads<37, 80, 2, 3>(native);  // T odd, one row block of 1, hd 40: panels of 32 and 8; parallel heads
  check_attention_heads<13, 30, 2, 2>(native);  // hd 15: an odd pair
  check_attention_heads<20, 48, 3, 2, tf::attention_dropout<0.2f>>(native);
}

TEST_CASE("a wide bf16 product split by columns across the threads gives the whole product") {
  if (!native_path_on()) return;
  check_wide_product(false, false);
  check_wide_product(true, false);
  check_wide_product(false, true);
}

// embedding, positional_embedding and tied_logits on tf::cuda: the kernels
// against the CPU layers' own code (backend/cpu/embedding.hpp), to the bit
// and twice alike; then a small language model (the three, a residual MLP
// block, layer_norm) trained on both devices in one binary, in float32 and
// under mixed_bfloat16. tests/unit/embedding_rows_test.cpp replays the same
// kernels on the CPU where no device exists.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <typeflow/cuda.hpp>

#include "compare_losses.hpp"
#include "device_vectors.hpp"

#include "../support/test_support.hpp"

namespace {

namespace cu = typeflow::backend::cuda;
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

}  // namespace

TEST_CASE("cuda embedding kernels: the CPU layers' bits, the same on every run") {
  struct shape {
    int rows, dim, vocab;
    std::size_t stride;
  };
  // GPT-2's vocabulary takes 16 bits of sort key; a tiny one, one.
  const shape shapes[] = {{1, 1, 1, 16}, {300, 33, 7, 48}, {512, 96, 50257, 96}, {2048, 64, 100, 64}};
  std::uint32_t seed = 3;
  for (const shape& s : shapes) {
    CAPTURE(s.rows);
    CAPTURE(s.vocab);
    std::mt19937 rng(seed++);
    std::uniform_int_distribution<int> id(0, s.vocab - 1);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(s.rows));
    for (auto& i : ids) i = id(rng);
    const std::size_t table_floats = static_cast<std::size_t>(s.vocab) * s.stride;
    const auto table = uniform(table_floats, seed++);
    const auto d_out = uniform(static_cast<std::size_t>(s.rows) * s.dim, seed++);
    auto ids_d = to_device(ids);
    auto table_d = to_device(table);
    auto d_out_d = to_device(d_out);
    const auto* ids_p = reinterpret_cast<const std::int32_t*>(ids_d.data());

    cu::device_buffer out_d(static_cast<std::size_t>(s.rows) * s.dim * sizeof(float));
    cu::embedding_forward(ids_p, reinterpret_cast<const float*>(table_d.data()), s.stride,
                          reinterpret_cast<float*>(out_d.data()), s.rows, s.dim, s.vocab, nullptr);
    const auto out = from_device(out_d, static_cast<std::size_t>(s.rows) * s.dim);
    for (int r = 0; r < s.rows; ++r)
      REQUIRE(std::memcmp(&out[static_cast<std::size_t>(r) * s.dim], &table[ids[r] * s.stride], s.dim * 4) == 0);

    const std::size_t scratch_bytes = cu::embedding_backward_scratch_bytes(s.rows, s.vocab);
    cu::device_buffer scratch(scratch_bytes);
    for (bool tied : {false, true}) {
      const auto start = tied ? uniform(table_floats, seed++) : std::vector<float>(table_floats, 0.f);
      std::vector<float> cpu = start;
      tf::detail::scatter_add_rows(cpu.data(), s.stride, ids.data(), d_out.data(), s.rows, s.dim);
      std::vector<float> runs[2];
      for (auto& gpu : runs) {
        auto grad_d = to_device(tied ? start : uniform(table_floats, 99));  // untied: zeroed by the kernel
        cu::embedding_backward(ids_p, reinterpret_cast<const float*>(d_out_d.data()),
                               reinterpret_cast<float*>(grad_d.data()), s.stride, s.rows, s.dim, s.vocab, tied,
                               scratch.data(), scratch_bytes, nullptr);
        gpu = from_device(grad_d, table_floats);
      }
      CHECK(std::memcmp(runs[0].data(), cpu.data(), table_floats * 4) == 0);
      CHECK(std::memcmp(runs[0].data(), runs[1].data(), table_floats * 4) == 0);
    }
  }
}

TEST_CASE("cuda positional_embedding kernels: rows plus their position's, the batch summed per position") {
  constexpr int batch = 13, length = 9, dim = 33;
  constexpr std::size_t stride = 48;
  const auto in = uniform(batch * length * dim, 1);
  const auto table = uniform(length * stride, 2);
  const auto d_out = uniform(batch * length * dim, 3);
  auto in_d = to_device(in), table_d = to_device(table), d_out_d = to_device(d_out);
  cu::device_buffer out_d(in.size() * sizeof(float)), grad_d(table.size() * sizeof(float));
  cu::positional_embedding_forward(reinterpret_cast<const float*>(in_d.data()),
                                   reinterpret_cast<const float*>(table_d.data()), stride,
                                   reinterpret_cast<float*>(out_d.data()), batch, length, dim, nullptr);
  const auto out = from_device(out_d, in.size());
  for (int b = 0; b < batch; ++b)
    for (int t = 0; t < length; ++t)
      for (int c = 0; c < dim; ++c) {
        const std::size_t i = (static_cast<std::size_t>(b) * length + t) * dim + c;
        REQUIRE(out[i] == in[i] + table[t * stride + c]);
      }
  TYPEFLOW_CUDA_CHECK(cudaMemset(grad_d.data(), 0, table.size() * sizeof(float)));
  cu::positional_embedding_backward(reinterpret_cast<const float*>(d_out_d.data()),
                                    reinterpret_cast<float*>(grad_d.data()), stride, batch, length, dim, nullptr);
  std::vector<float> cpu(table.size(), 0.f);
  tf::detail::sum_positions(cpu.data(), stride, d_out.data(), batch, length, dim);
  CHECK(std::memcmp(from_device(grad_d, table.size()).data(), cpu.data(), cpu.size() * 4) == 0);
}

namespace {

constexpr int T = 16, D = 32, V = 50;
using block = tf::residual<tf::layer_norm, tf::dense<4 * D>, tf::gelu, tf::dense<D>>;
using language_model = tf::sequential<tf::typed_input<tf::int32, T>, tf::embedding<V, D>, tf::positional_embedding<T>,
                                      block, tf::layer_norm, tf::tied_logits>;
constexpr int batch = 8, samples = 64;
constexpr std::uint64_t seed = 5;

// Next-token data over a repeating pattern: learnable, so the loss falls.
auto token_data() {
  std::vector<std::int32_t> features, labels;
  for (int s = 0; s < samples; ++s)
    for (int t = 0; t < T; ++t) {
      features.push_back((s * 7 + t * 3) % V);
      labels.push_back((s * 7 + (t + 1) * 3) % V);
    }
  return tf::data::from_tensor_slices<tf::shape<T>, tf::shape<T>>(features, labels) | tf::data::batch<batch>;
}

template <class Policy, class Device>
std::vector<double> train_language_model() {
  tf::model<language_model, Policy, tf::single_device, Device> model(seed);
  model.compile(tf::optimizers::adam{.learning_rate = 3e-3f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  std::vector<double> losses = model.fit(token_data(), {.epochs = 4, .verbose = 0})["loss"];
  losses.push_back(model.evaluate(token_data()).at("loss"));
  return losses;
}

template <class Policy>
void check_language_model(double tolerance) {  // four epochs, then evaluate
  cuda_test::check_losses_agree(train_language_model<Policy, tf::cuda>(), train_language_model<Policy, tf::cpu>(),
                                tolerance, 3);
}

}  // namespace

TEST_CASE("cuda model: a language model with tied logits trains like the CPU model (float32)") {
  check_language_model<tf::float32>(2e-3);
}

TEST_CASE("cuda model: the language model under mixed_bfloat16 trains like the CPU model") {
  // 16-bit products in both engines, rounded at different places (the CPU
  // also rounds d_E and d_x to bf16): the runs agree to about bf16's precision.
  check_language_model<tf::mixed_bfloat16>(3e-2);
}

TEST_CASE("cuda model: under mixed_bfloat16 the head's logits are bf16: loss, device metrics, class weights and predict as on the CPU") {
  using gpu_model = tf::model<language_model, tf::mixed_bfloat16, tf::single_device, tf::cuda>;
  static_assert(gpu_model::bound_network::bf16_logits);
  static_assert(!tf::model<language_model, tf::mixed_float16, tf::single_device, tf::cuda>::bound_network::bf16_logits);
  gpu_model gpu(seed);
  CHECK_THROWS_WITH_AS(gpu.compile(tf::optimizers::adam{}, tf::losses::sparse_categorical_crossentropy{}),
                       doctest::Contains("from_logits = true"), std::invalid_argument);
  tf::model<language_model, tf::mixed_bfloat16> cpu(seed);
  // Class weights scale the bf16 gradient's rows on the device; 0 drops a class.
  const std::map<int, float> class_weight{{0, 2.f}, {3, 0.5f}, {9, 0.f}};
  const auto train = [&](auto& m) {
    m.compile(tf::optimizers::adam{.learning_rate = 3e-3f},
              tf::losses::sparse_categorical_crossentropy{.from_logits = true},
              tf::metrics::sparse_categorical_accuracy{}, tf::metrics::sparse_top_k_categorical_accuracy{.k = 3});
    return m.fit(token_data(), {.epochs = 3, .verbose = 0, .class_weight = class_weight});
  };
  const auto on_gpu = train(gpu);
  const auto on_cpu = train(cpu);
  cuda_test::check_losses_agree(on_gpu["loss"], on_cpu["loss"], 3e-2, 2);
  for (const char* metric : {"sparse_categorical_accuracy", "sparse_top_k_categorical_accuracy"})
    for (std::size_t e = 0; e < 3; ++e) {
      INFO(metric << ", epoch " << e + 1 << ": gpu " << on_gpu[metric][e] << ", cpu " << on_cpu[metric][e]);
      CHECK(on_gpu[metric][e] == doctest::Approx(on_cpu[metric][e]).epsilon(0.05));
    }
  // predict brings the bf16 logits back as floats, rows of V without the padding.
  const std::vector<float> z_gpu = gpu.predict(token_data());
  const std::vector<float> z_cpu = cpu.predict(token_data());
  REQUIRE(z_gpu.size() == static_cast<std::size_t>(samples) * T * V);
  REQUIRE(z_gpu.size() == z_cpu.size());
  double worst = 0, largest = 0;
  for (std::size_t i = 0; i < z_cpu.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(z_gpu[i] - z_cpu[i])));
    largest = std::max(largest, static_cast<double>(std::abs(z_cpu[i])));
  }
  INFO("largest logit difference " << worst << " of logits up to " << largest);
  CHECK(worst < 0.05 * largest);
}

TEST_CASE("cuda model: a token id outside the vocabulary is refused on the host, naming its place") {
  tf::model<language_model, tf::float32, tf::single_device, tf::cuda> model(seed);
  model.compile(tf::optimizers::sgd{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  tf::data::batch_of<batch, tf::data::tensor_value<std::int32_t, tf::shape<T>>,
                     tf::data::tensor_value<std::int32_t, tf::shape<T>>>
      b;
  for (auto& id : b.features) id = 1;
  for (auto& y : b.labels) y = 2;
  b.valid = batch;
  b.features[3 * T + 5] = V + 4;
  const auto message = tf::testing::message_of<std::out_of_range>([&] { model.train_on_batch(b); });
  CHECK(tf::testing::contains(message, "token id 54 at sample 3, position 5"));
  CHECK(model.iterations() == 0);
}

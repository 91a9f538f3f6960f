// model::generate on tf::cuda: the decoder's programs on the device (the
// attention's key/value caches in its workspace, attention_decode's kernel,
// positions from run_state), against the same weights decoding on the CPU.
// Greedy decoding picks the same tokens on both devices, past the point
// where the caches fill and the context is fed again (train/generation.hpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <typeflow/cuda.hpp>

#include "../support/tiny_gpt.hpp"

namespace {

namespace tf = typeflow;
constexpr int T = 16, D = 32, V = 20;
using toy = tf::testing::tiny_gpt<T, D, V>;
using net = toy::net<tf::repeat<2, toy::block>>;

// A GPU model trained a little, and the CPU model with its weights.
template <class Policy>
struct trained_pair {
  tf::model<net, Policy, tf::single_device, tf::cuda> gpu{7};
  tf::model<net, Policy> cpu{7};
  trained_pair() {
    gpu.compile(tf::optimizers::adam{.learning_rate = 1e-2f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
    for (int step = 0; step < 40; ++step) gpu.train_on_batch(toy::token_batch(3 + step % 6));
    const auto file = std::filesystem::temp_directory_path() / "typeflow_cuda_generate_test.safetensors";
    gpu.save_weights(file);
    cpu.load_weights(file);
    std::filesystem::remove(file);
  }
};

const std::vector<std::int32_t> prompt{1, 2, 3, 4, 5};

}  // namespace

TEST_CASE("cuda generate: greedy and seeded sampling pick the CPU's tokens from the same weights (float32)") {
  trained_pair<tf::float32> m;
  const auto on_gpu = m.gpu.generate(prompt, 3 * T, {.temperature = 0.f});  // the caches fill twice
  REQUIRE(on_gpu.size() == 3 * T);
  CHECK(on_gpu == m.cpu.generate(prompt, 3 * T, {.temperature = 0.f}));
  // Sampling draws from the host's generator on both: the same seed, the same tokens.
  CHECK(m.gpu.generate(prompt, T, {.temperature = 0.8f, .top_k = 5, .seed = 9}) ==
        m.cpu.generate(prompt, T, {.temperature = 0.8f, .top_k = 5, .seed = 9}));
  // The decoder replaced the training program: training goes on.
  CHECK(std::isfinite(m.gpu.train_on_batch(toy::token_batch(1))));
}

TEST_CASE("cuda generate under mixed_bfloat16: the same tokens twice, each in the vocabulary") {
  // (bf16 products may add in another order than the CPU's: a near tie in
  // the logits could then go the other way, so this compares GPU with GPU.)
  trained_pair<tf::mixed_bfloat16> m;
  const auto first = m.gpu.generate(prompt, 2 * T, {.temperature = 0.f});
  CHECK(first == m.gpu.generate(prompt, 2 * T, {.temperature = 0.f}));
  for (std::int32_t t : first) CHECK((t >= 0 && t < V));
}

// Text generation: a language model's decoder run one position at a time,
// and the next token sampled from its logits (model::generate).
//
// The decoder is the network's specs bound for one position per call
// (sequential::decoder): attention keeps keys and values in a cache, so each
// new token costs one position, not the whole sequence. The context is the
// input's length T (the block size): a prompt longer than T is cut to its
// last T tokens, and when the cache is full the last T / 2 tokens are fed
// again from position 0 and generation goes on (each token then sees
// between T / 2 and T tokens of context, and the cost stays about one
// position per token).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "typeflow/core/random.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {

// generate's options. temperature divides the logits (0 picks the most
// likely token every time); top_k > 0 samples among the k most likely only;
// seed makes a run reproducible.
struct generate_options {
  float temperature = 1.f;
  int top_k = 0;
  std::uint64_t seed = 0;
};

// Token ids outside the vocabulary, an empty prompt, a negative temperature
// or a top_k above the vocabulary are refused with std::invalid_argument
// before anything runs.
inline void check_generate_arguments(std::span<const std::int32_t> prompt, int n, const generate_options& options,
                                     int vocab) {
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt needs at least one token");
  if (n < 0) throw std::invalid_argument("generate: n, the number of tokens to generate, is negative");
  if (!(options.temperature >= 0.f))
    throw std::invalid_argument("generate: temperature must be 0 (greedy) or positive; got " +
                                std::to_string(options.temperature));
  if (options.top_k < 0 || options.top_k > vocab)
    throw std::invalid_argument("generate: top_k must lie in [0, " + std::to_string(vocab) + "]; got " +
                                std::to_string(options.top_k));
  for (std::size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab)
      throw std::invalid_argument("generate: prompt token " + std::to_string(prompt[i]) + " at position " +
                                  std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
}

// One token drawn from logits: greedy at temperature 0, else from the
// softmax of logits / temperature over the top_k most likely (all if 0).
inline std::int32_t sample_token(const float* logits, std::vector<float>& probabilities, std::vector<int>& order,
                                 const generate_options& options, float uniform) {
  const int vocab = static_cast<int>(probabilities.size());
  if (options.temperature == 0.f) return static_cast<std::int32_t>(std::max_element(logits, logits + vocab) - logits);
  for (int i = 0; i < vocab; ++i) order[i] = i;
  int keep = options.top_k > 0 ? options.top_k : vocab;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const float top = logits[order[0]];
  double total = 0;
  for (int j = 0; j < keep; ++j) {
    probabilities[j] = std::exp((logits[order[j]] - top) / options.temperature);
    total += probabilities[j];
  }
  double target = uniform * total, running = 0;
  for (int j = 0; j < keep; ++j) {
    running += probabilities[j];
    if (target < running) return order[j];
  }
  return order[keep - 1];
}

// The n tokens that continue `prompt` (checked already), from a decoder
// program (batch 1: input() one token id, output() Vocab logits) whose
// executors read `run` (run.position is the fed position).
template <int Block, int Vocab, class Program>
std::vector<std::int32_t> generate_tokens(Program& program, run_state& run, std::span<const std::int32_t> prompt,
                                          int n, const generate_options& options) {
  run.training = false;
  std::vector<std::int32_t> context(prompt.size() > static_cast<std::size_t>(Block) ? prompt.end() - Block : prompt.begin(),
                                    prompt.end());
  context.reserve(static_cast<std::size_t>(Block));
  auto feed = [&](std::int32_t token, int position) {
    std::memcpy(program.input(), &token, sizeof token);
    run.position = position;
    program.forward();
  };
  for (std::size_t i = 0; i < context.size(); ++i) feed(context[i], static_cast<int>(i));

  std::vector<std::int32_t> generated;
  generated.reserve(static_cast<std::size_t>(n));
  std::vector<float> probabilities(Vocab);
  std::vector<int> order(Vocab);
  const random_stream rng{mix_seed(options.seed, 0x6E7u), 0};
  for (int step = 0; step < n; ++step) {
    const std::int32_t next =
        sample_token(program.output(), probabilities, order, options, rng.uniform(static_cast<std::uint64_t>(step)));
    generated.push_back(next);
    if (step + 1 == n) break;
    if (static_cast<int>(context.size()) == Block) {  // the cache is full: keep the last half
      context.erase(context.begin(), context.end() - Block / 2);
      for (std::size_t i = 0; i < context.size(); ++i) feed(context[i], static_cast<int>(i));
    }
    context.push_back(next);
    feed(next, static_cast<int>(context.size()) - 1);
  }
  run.position = 0;
  return generated;
}

}  // namespace typeflow

// A GPT of a few tokens for the mixed-precision tests: pre-norm blocks
// (attention, then a 4x MLP with gelu), learned positions and a head tied to
// the token embedding, over sequences of T ids from a vocabulary of V, width D.
#pragma once

#include <cstddef>
#include <cstdint>

#include <typeflow/typeflow.hpp>

namespace typeflow::testing {

template <int T, int D, int V>
struct tiny_gpt {
  using block = sequential<residual<layer_norm, causal_self_attention<2>>,
                           residual<layer_norm, dense<4 * D>, gelu, dense<D>>>;
  template <class Blocks>
  using net = sequential<typed_input<int32, T>, embedding<V, D>, positional_embedding<T>, Blocks, layer_norm,
                         tied_logits>;
  using tokens = data::tensor_value<std::int32_t, shape<T>>;

  // 4 sequences of random ids (random_stream `seed`); each label is the next
  // id, so the task is learnable.
  static data::batch_of<4, tokens, tokens> token_batch(std::uint64_t seed) {
    data::batch_of<4, tokens, tokens> b;
    for (std::size_t i = 0; i < b.features.size(); ++i) {
      b.features[i] = static_cast<std::int32_t>(random_stream{seed, 0}.uniform(i) * V);
      b.labels[i] = (b.features[i] + 1) % V;
    }
    b.valid = 4;
    return b;
  }
};

}  // namespace typeflow::testing

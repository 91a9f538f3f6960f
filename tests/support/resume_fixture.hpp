// What the checkpoint, resume and frozen tests train: a small classifier
// with dropout, its shuffled data, and numbered batches, each the same every
// time, so that two models fed them must take the same steps.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <utility>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace typeflow::testing {

// 12 features in [-1, 1) -> 4 classes, with dropout: masks and shuffle
// order both depend on the step, so a resume must restore both.
using dropout_classifier = sequential<input<12>, dense<32>, relu, dropout<0.25f>, dense<16>, tanh, dense<4>>;

// 192 samples (6 batches of 32), shuffled anew each epoch (key = epoch).
inline constexpr int classifier_samples = 192;
inline auto classifier_data() {
  std::vector<float> x(classifier_samples * 12);
  std::vector<std::int32_t> y(classifier_samples);
  const random_stream rng{17, 3};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 2.f * rng.uniform(i) - 1.f;
  for (int i = 0; i < classifier_samples; ++i)
    y[i] = (x[i * 12] + x[i * 12 + 5] > 0.f ? 1 : 0) + (x[i * 12 + 2] > 0.3f ? 2 : 0);
  return data::from_tensor_slices<shape<12>>(std::move(x), std::move(y)) | data::shuffle(classifier_samples, 9) |
         data::batch<32>;
}

// numbered_batch<N, F, C>(index): a full batch of N samples, F features in
// [-1, 1) and class ids in [0, C), different for each index.
template <int N, int F, int C>
data::batch_of<N, data::tensor_value<float, shape<F>>, data::tensor_value<std::int32_t, shape<>>> numbered_batch(
    int index) {
  data::batch_of<N, data::tensor_value<float, shape<F>>, data::tensor_value<std::int32_t, shape<>>> b;
  const random_stream rng{91, static_cast<std::uint64_t>(index)};
  for (std::size_t i = 0; i < b.features.size(); ++i) b.features[i] = 2.f * rng.uniform(i) - 1.f;
  for (int i = 0; i < N; ++i) b.labels[i] = (i * 5 + index) % C;
  b.valid = N;
  return b;
}

// Two float regions, bit for bit.
inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// Every tensor of two checkpoints (weights and each optimizer slot, whole
// whether one file holds it or a zero<k> model's shard files), byte for byte.
inline bool same_tensors(const std::filesystem::path& a, const std::filesystem::path& b) {
  const auto x = io::read_checkpoint(a), y = io::read_checkpoint(b);
  const auto names = checkpoint_tensor_names(x);
  if (names.size() != checkpoint_tensor_names(y).size()) return false;
  for (const auto& name : names) {
    const auto p = checkpoint_floats(x, name), q = checkpoint_floats(y, name);
    if (p.size() != q.size() || std::memcmp(p.data(), q.data(), p.size() * sizeof(float)) != 0) return false;
  }
  return true;
}

}  // namespace typeflow::testing

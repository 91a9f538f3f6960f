// fit's validation_split, as Keras's: the last fraction of the training
// samples, taken before any shuffling, is held out and evaluated after every
// epoch, and fit trains on the rest (Keras's split_at = ceil(n * (1 - fraction))).
// Keras takes it from arrays; here the dataset must give the same samples in
// the same order every epoch (no shuffle, no random augmentation), which fit
// checks by reading epochs 0 and 1 once, before training.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "typeflow/data/example.hpp"
#include "typeflow/data/rebatch.hpp"

namespace typeflow {

namespace detail {

// One pass's samples and a hash of their values (features, labels, weights),
// in order.
template <class Dataset>
std::pair<std::int64_t, std::uint64_t> pass_fingerprint(const Dataset& data, std::uint64_t epoch) {
  using batch_type = typename Dataset::element_type;
  std::uint64_t hash = 0xCBF29CE484222325ull;
  const auto mix = [&hash](const void* values, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(values);
    std::size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      std::uint64_t word;
      std::memcpy(&word, p + i, 8);
      hash = (hash ^ word) * 0x100000001B3ull;
    }
    for (; i < bytes; ++i) hash = (hash ^ p[i]) * 0x100000001B3ull;
  };
  std::int64_t samples = 0;
  batch_type batch;
  auto cursor = data.open(epoch);
  while (cursor.next(batch)) {
    const auto rows = static_cast<std::size_t>(batch.valid);
    mix(batch.features.data(), rows * batch_type::features_type::size * sizeof(batch.features[0]));
    mix(batch.labels.data(), rows * batch_type::label_type::size * sizeof(batch.labels[0]));
    if (!batch.sample_weights.empty()) mix(batch.sample_weights.data(), rows * sizeof(float));
    samples += batch.valid;
  }
  return {samples, hash};
}

}  // namespace detail

// The training part (samples 0 .. split_at - 1) and the validation part (the
// rest) of `data`, both batched as it is.
template <data::batched_dataset Dataset>
auto split_for_validation(const Dataset& data, double fraction) {
  constexpr int n = Dataset::element_type::size;
  if (!(fraction > 0 && fraction < 1))
    throw std::invalid_argument("fit: validation_split is " + std::to_string(fraction) +
                                "; it must lie strictly between 0 and 1");
  if (data.cardinality() == data::infinite_cardinality)
    throw std::invalid_argument(
        "fit: validation_split needs a finite dataset, and this one repeats without end; give validation_data instead");
  const auto [samples, hash] = detail::pass_fingerprint(data, 0);
  const auto [again, hash_again] = detail::pass_fingerprint(data, 1);
  if (samples != again || hash != hash_again)
    throw std::invalid_argument(
        "fit: validation_split holds out the last samples before any shuffling, as Keras does, so the dataset must "
        "give the same samples in the same order every epoch, and its epochs 0 and 1 differ (a shuffle, or a random "
        "map?); split before shuffling (take and skip) and give validation_data instead");
  const auto split_at = static_cast<std::int64_t>(std::ceil(static_cast<double>(samples) * (1.0 - fraction)));
  if (split_at <= 0 || split_at >= samples)
    throw std::invalid_argument("fit: validation_split of " + std::to_string(fraction) + " over " +
                                std::to_string(samples) + " samples leaves " +
                                (split_at <= 0 ? "none to train on" : "none to validate on"));
  return std::pair{data::rebatch<n>(data, 0, split_at), data::rebatch<n>(data, split_at, samples)};
}

}  // namespace typeflow

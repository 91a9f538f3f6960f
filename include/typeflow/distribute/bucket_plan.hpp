// How the gradient region is cut into all-reduce buckets, for overlapping the
// gradient all-reduce with the backward pass (distribute/bucketed_all_reduce.hpp's
// bucketed_all_reduce). Pure host logic, no CUDA: tested on the CPU.
//
// The gradients of all layers lie in one flat float array, layer after layer
// (layer_float_offsets[l] is where layer l starts). The backward pass produces
// the last layer's gradients first, so buckets are formed from the last layer
// backwards: buckets()[0] holds the last layers and is the first one ready.
// A bucket is a run of whole layers, as many as fit in bucket_floats; a layer
// is never split (a layer larger than a bucket gets a bucket of its own:
// splitting it would give no overlap, as all its parts are ready at once).
#pragma once

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace typeflow::distribute {

// 25 MiB of float gradients: the bucket size PyTorch DDP found to balance
// launch overhead against overlap.
inline constexpr std::size_t default_bucket_bytes = std::size_t{25} << 20;

struct gradient_bucket {
  std::size_t first_layer = 0;  // layers [first_layer, end_layer)
  std::size_t end_layer = 0;
  std::size_t offset = 0;  // floats [offset, offset + count) of the gradient region
  std::size_t count = 0;
  std::size_t layers() const noexcept { return end_layer - first_layer; }
  friend bool operator==(const gradient_bucket&, const gradient_bucket&) = default;
};

// Buckets in the order the backward pass completes them (last layers first).
// layer_float_offsets: one entry per layer, non-decreasing, starting at 0, all
// <= total_floats (layer l spans [offsets[l], offsets[l+1]) and the last one
// ends at total_floats; layers without parameters have zero length).
// Greedy from the last layer: a bucket is closed when the next layer would
// take it past bucket_floats, so every bucket either fits in bucket_floats or
// is a single larger layer, and every bucket but the last would overflow with
// the next layer added. Empty layers join the bucket being filled; only an
// all-empty region gives a bucket of count 0 (one, holding every layer).
inline std::vector<gradient_bucket> plan_buckets(std::span<const std::size_t> layer_float_offsets,
                                                 std::size_t total_floats, std::size_t bucket_floats) {
  const std::size_t layers = layer_float_offsets.size();
  if (layers == 0) throw std::invalid_argument("plan_buckets: no layers (layer_float_offsets is empty)");
  if (bucket_floats == 0) throw std::invalid_argument("plan_buckets: bucket_floats must be at least 1");
  if (layer_float_offsets[0] != 0)
    throw std::invalid_argument("plan_buckets: the first layer must start at float 0, not " +
                                std::to_string(layer_float_offsets[0]));
  for (std::size_t l = 0; l < layers; ++l) {
    const std::size_t end = l + 1 < layers ? layer_float_offsets[l + 1] : total_floats;
    if (end < layer_float_offsets[l])
      throw std::invalid_argument("plan_buckets: layer " + std::to_string(l) + " starts at float " +
                                  std::to_string(layer_float_offsets[l]) + " but ends at " + std::to_string(end) +
                                  " (offsets must be non-decreasing and at most total_floats = " +
                                  std::to_string(total_floats) + ")");
  }

  std::vector<gradient_bucket> buckets;
  gradient_bucket open{.first_layer = layers, .end_layer = layers, .offset = total_floats, .count = 0};
  for (std::size_t l = layers; l-- > 0;) {
    const std::size_t begin = layer_float_offsets[l];
    const std::size_t end = l + 1 < layers ? layer_float_offsets[l + 1] : total_floats;
    const std::size_t size = end - begin;
    if (size > 0 && open.count > 0 && open.count + size > bucket_floats) {
      buckets.push_back(open);
      open = gradient_bucket{.first_layer = l + 1, .end_layer = l + 1, .offset = end, .count = 0};
    }
    open.first_layer = l;
    open.offset = begin;
    open.count += size;
  }
  buckets.push_back(open);
  return buckets;
}

// Which bucket (index into plan_buckets' result) holds each layer.
inline std::vector<std::size_t> bucket_of_layers(std::span<const gradient_bucket> buckets) {
  std::size_t layers = 0;
  for (const auto& b : buckets) layers = b.end_layer > layers ? b.end_layer : layers;
  std::vector<std::size_t> owner(layers);
  for (std::size_t b = 0; b < buckets.size(); ++b)
    for (std::size_t l = buckets[b].first_layer; l < buckets[b].end_layer; ++l) owner[l] = b;
  return owner;
}

}  // namespace typeflow::distribute

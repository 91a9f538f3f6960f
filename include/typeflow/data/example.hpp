// What flows through a pipeline: examples, then batches of them.
//
// An example holds one sample inline (no heap), so map and shuffle move plain
// values. batch<N> packs N of them into contiguous arrays that fit copies into
// the model's arena; the batch's storage is allocated once, when the consumer
// creates it, and refilled in place every step.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "typeflow/core/shape.hpp"

namespace typeflow::data {

// One sample's tensor, stored inline: T elements laid out row-major in Shape.
template <class T, class Shape>
struct tensor_value {
  using value_type = T;
  using shape_type = Shape;
  static constexpr std::size_t size = Shape::size;

  std::array<T, Shape::size> values{};

  T* data() noexcept { return values.data(); }
  const T* data() const noexcept { return values.data(); }
  T& operator[](std::size_t i) noexcept { return values[i]; }
  const T& operator[](std::size_t i) const noexcept { return values[i]; }
};

// A features/label pair. Label is a tensor_value, e.g. a class id:
// tensor_value<std::int32_t, shape<>>.
template <class Features, class Label>
struct example {
  using features_type = Features;
  using label_type = Label;
  Features features;
  Label label;
};

// An example with Keras's sample weight: its row's loss counts `weight`
// times (fit and evaluate; the metrics are not weighted, as Keras's
// `metrics=` are not). batch<N> packs the weights into batch_of::sample_weights.
template <class Features, class Label>
struct weighted_example {
  using features_type = Features;
  using label_type = Label;
  Features features;
  Label label;
  float weight = 1.f;
};

template <class T>
inline constexpr bool is_weighted_example_v = false;
template <class F, class L>
inline constexpr bool is_weighted_example_v<weighted_example<F, L>> = true;

template <class T>
inline constexpr bool is_example_v = is_weighted_example_v<T>;
template <class F, class L>
inline constexpr bool is_example_v<example<F, L>> = true;

// N examples, contiguous: features (N, Features::shape), labels (N, Label::shape).
// Rows at index >= valid are padding (zero-filled) after the last real sample,
// so that evaluate and predict can count every sample; training skips a batch
// with valid < N. The mask of a padded batch is rows [0, valid): is_padding(row)
// says which side of it a row is on. sample_weights: empty, or (N) when the
// examples were weighted_example (padding rows weigh 0).
template <int N, class Features, class Label>
struct batch_of {
  static_assert(N > 0, "batch<N>: the batch size N must be positive");
  static constexpr int size = N;
  using features_type = Features;
  using label_type = Label;
  using feature_value = typename Features::value_type;
  using label_value = typename Label::value_type;

  std::vector<feature_value> features = std::vector<feature_value>(N * Features::size);
  std::vector<label_value> labels = std::vector<label_value>(N * Label::size);
  int valid = 0;
  std::vector<float> sample_weights{};  // empty: every row weighs 1

  constexpr bool is_padding(int row) const noexcept { return row >= valid; }
};

template <class T>
inline constexpr bool is_batch_v = false;
template <int N, class F, class L>
inline constexpr bool is_batch_v<batch_of<N, F, L>> = true;

// What cardinality() returns when it is not a count: tf.data's UNKNOWN
// (filter, interleave, a user's generator) and INFINITE (repeat()).
inline constexpr std::int64_t unknown_cardinality = -1;
inline constexpr std::int64_t infinite_cardinality = -2;

// A dataset is a description; open(epoch) starts one pass over it and returns
// a cursor whose next(out) fills out and returns false at the end. The epoch
// number lets shuffle reshuffle deterministically from (seed, epoch).
//
// Cursors are movable, and a cursor never refers to its dataset (it holds
// copies or shared storage), so a cursor may outlive the dataset that opened
// it. A cursor's destructor ends its pass at any point: stages that run
// threads stop and join them there.
template <class D>
concept dataset = requires(const D& d, typename D::element_type& out) {
  typename D::element_type;
  { d.cardinality() } -> std::convertible_to<std::int64_t>;  // -1 when unknown
  { d.open(std::uint64_t{0}).next(out) } -> std::convertible_to<bool>;
};

template <class D>
concept batched_dataset = dataset<D> && is_batch_v<typename D::element_type>;

// Optionally, a dataset whose cursors can also read element i of a pass
// directly says so: random_access() returns true, and its cursor has
// read_at(index, out), for 0 <= index < cardinality(). from_tensor_slices,
// mnist, fashion_mnist, csv and lm_windows are; so is a sequential map over
// one of them (f is applied by read_at). shuffle then shuffles indices
// instead of elements: the same order, without copying its buffer's worth of
// elements before the first one comes out.
template <class D>
concept random_access_dataset =
    dataset<D> && requires(const D& d, typename D::element_type& out) {
      { d.random_access() } -> std::convertible_to<bool>;
      d.open(std::uint64_t{0}).read_at(std::int64_t{0}, out);
    };

namespace detail {

// Moves an element from a stage's buffer slot to the consumer without
// allocating: plain values (examples) are copied, anything that owns memory
// (batch_of's vectors) is swapped, so that the slot keeps the consumer's old
// storage, already of the right size, to be refilled in place.
template <class T>
void hand_over(T& from, T& to) {
  if constexpr (std::is_trivially_copyable_v<T>) {
    to = from;
  } else {
    using std::swap;
    swap(from, to);
  }
}

}  // namespace detail

}  // namespace typeflow::data

// from_tensor_slices: a dataset over samples already in memory, like
// tf.data.Dataset.from_tensor_slices((features, labels)).
//
//   features  (n, FeatureShape...)   std::vector<F>, row-major, n * FeatureShape::size values
//   labels    (n, LabelShape...)     std::vector<L>, n * LabelShape::size values
//   element   example<tensor_value<F, FeatureShape>, tensor_value<L, LabelShape>>
//
// from_tensor_slices<...>(features, labels, sample_weight): Keras's
// fit(x, y, sample_weight=w); the elements are weighted_example, one float
// weight a sample (finite, not negative).
//
// The dataset owns its data through a shared_ptr to const storage: copying the
// dataset (every `|` does) copies a pointer, and every cursor reads the same
// immutable samples in order. A size that is not a whole number of samples, or
// feature and label sample counts that differ, throw std::invalid_argument.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "typeflow/core/shape.hpp"
#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"

namespace typeflow::data {

template <class F, class FeatureShape, class L, class LabelShape, bool Weighted = false>
class tensor_slices_dataset {
  static_assert(is_shape_v<FeatureShape>, "from_tensor_slices<FeatureShape, LabelShape>: FeatureShape must be a typeflow::shape<...>");
  static_assert(is_shape_v<LabelShape>, "from_tensor_slices<FeatureShape, LabelShape>: LabelShape must be a typeflow::shape<...>");

  struct storage;

 public:
  using features_type = tensor_value<F, FeatureShape>;
  using label_type = tensor_value<L, LabelShape>;
  using element_type =
      std::conditional_t<Weighted, weighted_example<features_type, label_type>, example<features_type, label_type>>;

  tensor_slices_dataset(std::vector<F> features, std::vector<L> labels, std::vector<float> weights = {})
      : storage_(std::make_shared<const storage>(checked(std::move(features), std::move(labels), std::move(weights)))) {}

  std::int64_t cardinality() const noexcept { return static_cast<std::int64_t>(storage_->count); }
  bool random_access() const noexcept { return true; }

  class cursor {
   public:
    bool next(element_type& out) noexcept {
      if (index_ >= storage_->count) return false;
      std::copy_n(storage_->features.data() + index_ * FeatureShape::size, FeatureShape::size, out.features.data());
      std::copy_n(storage_->labels.data() + index_ * LabelShape::size, LabelShape::size, out.label.data());
      if constexpr (Weighted) out.weight = storage_->weights[index_];
      ++index_;
      return true;
    }

    // Sample `index` (0 <= index < cardinality()), without moving the pass's position.
    void read_at(std::int64_t index, element_type& out) const noexcept {
      const auto i = static_cast<std::size_t>(index);
      std::copy_n(storage_->features.data() + i * FeatureShape::size, FeatureShape::size, out.features.data());
      std::copy_n(storage_->labels.data() + i * LabelShape::size, LabelShape::size, out.label.data());
      if constexpr (Weighted) out.weight = storage_->weights[i];
    }

   private:
    friend class tensor_slices_dataset;
    explicit cursor(std::shared_ptr<const storage> shared) : storage_(std::move(shared)) {}
    std::shared_ptr<const storage> storage_;
    std::size_t index_ = 0;
  };

  cursor open(std::uint64_t /*epoch*/ = 0) const { return cursor(storage_); }

 private:
  struct storage {
    std::vector<F> features;  // (count, FeatureShape...)
    std::vector<L> labels;    // (count, LabelShape...)
    std::vector<float> weights;  // (count) when Weighted, else empty
    std::size_t count = 0;
  };

  static storage checked(std::vector<F> features, std::vector<L> labels, std::vector<float> weights) {
    const auto whole = [](std::size_t values, std::size_t per_sample, const char* what, std::string shape_str) {
      if (values % per_sample != 0)
        throw std::invalid_argument("from_tensor_slices: the " + std::string(what) + " hold " +
                                    std::to_string(values) + " values, which is not a whole number of samples of shape " +
                                    shape_str + " (" + std::to_string(per_sample) + " values each)");
      return values / per_sample;
    };
    const std::size_t feature_samples = whole(features.size(), FeatureShape::size, "features", FeatureShape::str());
    const std::size_t label_samples = whole(labels.size(), LabelShape::size, "labels", LabelShape::str());
    if (feature_samples != label_samples)
      throw std::invalid_argument("from_tensor_slices: the features hold " + std::to_string(feature_samples) +
                                  " samples but the labels hold " + std::to_string(label_samples) +
                                  "; every sample needs one label");
    if (Weighted && weights.size() != feature_samples)
      throw std::invalid_argument("from_tensor_slices: the features hold " + std::to_string(feature_samples) +
                                  " samples but sample_weight holds " + std::to_string(weights.size()) +
                                  " weights; every sample needs one");
    for (std::size_t i = 0; i < weights.size(); ++i)
      if (!(weights[i] >= 0.f) || !std::isfinite(weights[i]))
        throw std::invalid_argument("from_tensor_slices: sample_weight[" + std::to_string(i) + "] is " +
                                    std::to_string(weights[i]) + "; a weight must be finite and not negative");
    return storage{std::move(features), std::move(labels), std::move(weights), feature_samples};
  }

  std::shared_ptr<const storage> storage_;
};

// float features and int32 class ids, the common case; braced lists work here.
template <class FeatureShape, class LabelShape = shape<>>
auto from_tensor_slices(std::vector<float> features, std::vector<std::int32_t> labels) {
  return tensor_slices_dataset<float, FeatureShape, std::int32_t, LabelShape>(std::move(features), std::move(labels));
}

// Any feature and label value types, deduced from the vectors.
template <class FeatureShape, class LabelShape = shape<>, class F, class L>
auto from_tensor_slices(std::vector<F> features, std::vector<L> labels) {
  return tensor_slices_dataset<F, FeatureShape, L, LabelShape>(std::move(features), std::move(labels));
}

// With one sample weight a sample: weighted_example elements.
template <class FeatureShape, class LabelShape = shape<>>
auto from_tensor_slices(std::vector<float> features, std::vector<std::int32_t> labels, std::vector<float> sample_weight) {
  return tensor_slices_dataset<float, FeatureShape, std::int32_t, LabelShape, true>(std::move(features), std::move(labels),
                                                                                      std::move(sample_weight));
}
template <class FeatureShape, class LabelShape = shape<>, class F, class L>
auto from_tensor_slices(std::vector<F> features, std::vector<L> labels, std::vector<float> sample_weight) {
  return tensor_slices_dataset<F, FeatureShape, L, LabelShape, true>(std::move(features), std::move(labels),
                                                                     std::move(sample_weight));
}

}  // namespace typeflow::data

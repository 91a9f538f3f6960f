// zip_named<"a", "b">(a, b) and examples(features, labels): sources of
// single tensors zipped into the named parts a model with several inputs or
// outputs takes, like tf.data's Dataset.zip(({"image": a, "ink": b}, {"class": c})).
//
//   auto features = zip_named<"image", "ink">(images, inks);   // record<image, ink>
//   auto labels = zip_named<"class", "group">(kinds, groups);   // record<class, group>
//   auto train = examples(features, labels) | batch<64>;        // example<record, record>
//
// Each source's element is a tensor_value (float or int32); the pass ends
// with the shortest source, as zip's does.
#pragma once

#include <cstddef>
#include <tuple>
#include <utility>

#include "typeflow/core/fixed_string.hpp"
#include "typeflow/data/example.hpp"
#include "typeflow/data/map.hpp"
#include "typeflow/data/record.hpp"
#include "typeflow/data/zip.hpp"

namespace typeflow::data {

template <fixed_string... Names, dataset... Sources>
auto zip_named(Sources... sources) {
  static_assert(sizeof...(Names) == sizeof...(Sources),
                "zip_named<Names...>(sources...): give one name per source");
  return zip(std::move(sources)...) | map([](const auto& values) {
           return std::apply([](const auto&... value) { return parts(named<Names>(value)...); }, values);
         });
}

// The examples (features element i, label element i).
template <dataset Features, dataset Labels>
auto examples(Features features, Labels labels) {
  return zip(std::move(features), std::move(labels)) | map([](const auto& pair) {
           return example<typename Features::element_type, typename Labels::element_type>{std::get<0>(pair),
                                                                                          std::get<1>(pair)};
         });
}

}  // namespace typeflow::data

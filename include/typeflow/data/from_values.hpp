// from_values(values): one element per value of a vector, in order, such as
// the file paths that interleave opens.
//
//   from_values(std::vector<T>{...})    element_type = T; cardinality = values.size()
//
// The values are shared by every copy of the dataset and every cursor, as
// from_tensor_slices's are; next() copies one value into the caller's element.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "typeflow/data/example.hpp"

namespace typeflow::data {

template <class T>
class values_dataset {
 public:
  using element_type = T;

  explicit values_dataset(std::vector<T> values) : values_(std::make_shared<const std::vector<T>>(std::move(values))) {}

  std::int64_t cardinality() const noexcept { return static_cast<std::int64_t>(values_->size()); }

  class cursor {
   public:
    bool next(element_type& out) {
      if (index_ >= values_->size()) return false;
      out = (*values_)[index_++];
      return true;
    }

   private:
    friend class values_dataset;
    explicit cursor(std::shared_ptr<const std::vector<T>> values) : values_(std::move(values)) {}
    std::shared_ptr<const std::vector<T>> values_;
    std::size_t index_ = 0;
  };

  cursor open(std::uint64_t /*epoch*/ = 0) const { return cursor(values_); }

 private:
  std::shared_ptr<const std::vector<T>> values_;
};

template <class T>
values_dataset<T> from_values(std::vector<T> values) {
  return values_dataset<T>(std::move(values));
}

}  // namespace typeflow::data

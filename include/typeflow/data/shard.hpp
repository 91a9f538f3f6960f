// shard(num_shards, index): every num_shards-th element, starting at element
// index, like tf.data's Dataset.shard; for multi-worker training, where worker
// i of n reads shard(n, i) and the workers together read every element once.
//
//   source | shard(n, i)    element_type: the source's
//                           cardinality: ceil((the source's - i) / n), 0 if i >= the source's
//
// Shard before shuffling, so that the shards partition the data the same way
// on every worker. The skipped elements are read into the caller's element
// and overwritten. n < 1 or i outside [0, n) throws std::invalid_argument.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"

namespace typeflow::data {

template <dataset Source>
class shard_dataset {
 public:
  using element_type = typename Source::element_type;

  shard_dataset(Source source, std::int64_t num_shards, std::int64_t index)
      : source_(std::move(source)), num_shards_(num_shards), index_(index) {}

  std::int64_t cardinality() const {
    const std::int64_t n = source_.cardinality();
    if (n < 0) return n;
    return n > index_ ? (n - index_ - 1) / num_shards_ + 1 : 0;
  }

  class cursor {
   public:
    bool next(element_type& out) {
      if (ended_) return false;
      // Before the first element: index elements; before each later one: num_shards - 1.
      for (std::int64_t i = 0; i < to_skip_; ++i)
        if (!source_.next(out)) {
          ended_ = true;
          return false;
        }
      to_skip_ = num_shards_ - 1;
      if (!source_.next(out)) {
        ended_ = true;
        return false;
      }
      return true;
    }

   private:
    friend class shard_dataset;
    cursor(cursor_t<Source> source, std::int64_t num_shards, std::int64_t index)
        : source_(std::move(source)), num_shards_(num_shards), to_skip_(index) {}
    cursor_t<Source> source_;
    std::int64_t num_shards_;
    std::int64_t to_skip_;
    bool ended_ = false;
  };

  cursor open(std::uint64_t epoch = 0) const { return cursor(source_.open(epoch), num_shards_, index_); }

 private:
  Source source_;
  std::int64_t num_shards_;
  std::int64_t index_;
};

struct shard_adaptor {
  static constexpr bool is_pipeline_adaptor = true;
  std::int64_t num_shards;
  std::int64_t index;

  template <dataset Source>
  shard_dataset<Source> operator()(Source source) const {
    return shard_dataset<Source>(std::move(source), num_shards, index);
  }
};

inline shard_adaptor shard(std::int64_t num_shards, std::int64_t index) {
  if (num_shards < 1)
    throw std::invalid_argument("shard(num_shards, index): num_shards must be at least 1; got " +
                                std::to_string(num_shards));
  if (index < 0 || index >= num_shards)
    throw std::invalid_argument("shard(num_shards, index): index must be in [0, num_shards), here [0, " +
                                std::to_string(num_shards) + "); got " + std::to_string(index));
  return {num_shards, index};
}

}  // namespace typeflow::data

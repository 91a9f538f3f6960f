// shuffle(buffer_size, seed, reshuffle_each_iteration): tf.data's Dataset.shuffle,
// reproducible everywhere.
//
//   source | shuffle(b, seed)           element_type and cardinality: the source's
//   source | shuffle(b, seed, false)    the same order every epoch (that of epoch 0)
//
// A buffer holds up to b elements. Each output is a uniformly random element
// of the buffer, whose slot is then refilled with the next input; once the
// input is exhausted the buffer drains in random order. b >= the dataset's
// size is a uniform permutation; b == 1 keeps the order.
//
// Each epoch is shuffled differently (unless reshuffle_each_iteration is
// false: then every epoch uses epoch 0's order), and the same (seed, epoch) gives the
// same order on every platform and standard library: the generator is
// std::mt19937_64 (its output is fixed by the standard), seeded from a
// SplitMix64 mix of seed and epoch, and indices are drawn with Lemire's
// unbiased bounded method rather than std::uniform_int_distribution, whose
// algorithm each library chooses. The buffer is allocated once, when the
// cursor opens; next() moves elements, it never allocates.
//
// Over a random-access source (random_access_dataset: from_tensor_slices,
// mnist, csv, lm_windows, a sequential map of one) the buffer holds indices
// instead of elements, with the same draws and so the same order: the first
// element comes out without b elements read first (for mnist | map(scale) |
// shuffle(60000), 190 MB copied and 60000 calls of f before each epoch's
// first batch), and each element is read, and f applied, as it leaves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "typeflow/core/random.hpp"
#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"

namespace typeflow::data {

namespace detail {

// The generator's seed for one epoch of one shuffle.
constexpr std::uint64_t shuffle_seed(std::uint64_t seed, std::uint64_t epoch) noexcept {
  return splitmix64(splitmix64(seed) ^ splitmix64(epoch + 0x632BE59BD9B4E019ull));
}

// The high and low halves of a * b, from 32-bit pieces: portable C++ (no
// unsigned __int128), and one multiply per element is not where time goes.
constexpr void multiply_64x64(std::uint64_t a, std::uint64_t b, std::uint64_t& high, std::uint64_t& low) noexcept {
  const std::uint64_t a_lo = a & 0xFFFFFFFFu, a_hi = a >> 32, b_lo = b & 0xFFFFFFFFu, b_hi = b >> 32;
  const std::uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi, hi_hi = a_hi * b_hi;
  const std::uint64_t middle = (lo_lo >> 32) + (hi_lo & 0xFFFFFFFFu) + lo_hi;  // < 2^64: no carry lost
  high = hi_hi + (hi_lo >> 32) + (middle >> 32);
  low = (middle << 32) | (lo_lo & 0xFFFFFFFFu);
}

// A uniform integer in [0, range), range > 0: Lemire, "Fast Random Integer
// Generation in an Interval" (2019). Unbiased; rejects with probability < range / 2^64.
inline std::uint64_t uniform_below(std::mt19937_64& generator, std::uint64_t range) noexcept {
  std::uint64_t high, low;
  multiply_64x64(generator(), range, high, low);
  if (low < range) {
    const std::uint64_t threshold = (0 - range) % range;  // 2^64 mod range
    while (low < threshold) multiply_64x64(generator(), range, high, low);
  }
  return high;
}

}  // namespace detail

template <dataset Source>
class shuffle_dataset {
 public:
  using element_type = typename Source::element_type;

  shuffle_dataset(Source source, std::size_t buffer_size, std::uint64_t seed, bool reshuffle_each_iteration = true)
      : source_(std::move(source)),
        buffer_size_(buffer_size),
        seed_(seed),
        reshuffle_each_iteration_(reshuffle_each_iteration) {}

  std::int64_t cardinality() const { return source_.cardinality(); }
  std::size_t buffer_size() const noexcept { return buffer_size_; }
  std::uint64_t seed() const noexcept { return seed_; }
  bool reshuffle_each_iteration() const noexcept { return reshuffle_each_iteration_; }

  class cursor {
   public:
    bool next(element_type& out) {
      if (by_index_) return next_by_index(out);
      if (!started_) fill();
      if (buffer_.empty()) return false;
      const std::size_t pick = static_cast<std::size_t>(detail::uniform_below(generator_, buffer_.size()));
      detail::hand_over(buffer_[pick], out);  // a batch's storage stays in the buffer, to be refilled
      if (source_exhausted_ || !source_.next(buffer_[pick])) {
        source_exhausted_ = true;
        if (pick + 1 != buffer_.size()) buffer_[pick] = std::move(buffer_.back());
        buffer_.pop_back();
      }
      return true;
    }

   private:
    friend class shuffle_dataset;
    cursor(cursor_t<Source> source, std::size_t buffer_size, std::int64_t cardinality, std::uint64_t seed,
           bool by_index)
        : source_(std::move(source)), generator_(seed), by_index_(by_index) {
      // Never more than the dataset holds, when it says how much that is.
      const std::size_t capacity =
          cardinality >= 0 && static_cast<std::uint64_t>(cardinality) < buffer_size
              ? static_cast<std::size_t>(cardinality)
              : buffer_size;
      if (by_index_) {
        indices_.reserve(capacity);
        count_ = cardinality;
      } else {
        buffer_.reserve(capacity);
      }
      buffer_size_ = buffer_size;
    }

    // Read up to buffer_size elements; deferred to the first next() so that
    // open() stays cheap and the read happens where the consumer expects it.
    void fill() {
      started_ = true;
      while (buffer_.size() < buffer_size_) {
        buffer_.emplace_back();
        if (!source_.next(buffer_.back())) {
          buffer_.pop_back();
          source_exhausted_ = true;
          return;
        }
      }
    }

    // The same algorithm over the indices 0..count-1 of a random-access
    // source, drawing the same numbers, so the same order; an element is read
    // (and a map's f applied) only when it leaves the buffer.
    bool next_by_index(element_type& out) {
      if constexpr (random_access_dataset<Source>) {
        if (!started_) {
          started_ = true;
          while (indices_.size() < buffer_size_ && next_index_ < count_) indices_.push_back(next_index_++);
        }
        if (indices_.empty()) return false;
        const std::size_t pick = static_cast<std::size_t>(detail::uniform_below(generator_, indices_.size()));
        source_.read_at(indices_[pick], out);
        if (next_index_ < count_) {
          indices_[pick] = next_index_++;
        } else {
          if (pick + 1 != indices_.size()) indices_[pick] = indices_.back();
          indices_.pop_back();
        }
        return true;
      } else {
        return false;  // never: by_index_ is only set for random-access sources
      }
    }

    cursor_t<Source> source_;
    std::mt19937_64 generator_;
    std::vector<element_type> buffer_;   // (up to buffer_size elements)
    std::vector<std::int64_t> indices_;  // (up to buffer_size indices), instead, by index
    std::size_t buffer_size_ = 0;
    std::int64_t count_ = 0;        // by index: the source's size
    std::int64_t next_index_ = 0;   // by index: the next index to enter the buffer
    bool by_index_ = false;
    bool started_ = false;
    bool source_exhausted_ = false;
  };

  cursor open(std::uint64_t epoch = 0) const {
    const std::uint64_t order = reshuffle_each_iteration_ ? epoch : 0;
    bool by_index = false;
    if constexpr (random_access_dataset<Source>) by_index = source_.random_access() && source_.cardinality() >= 0;
    return cursor(source_.open(epoch), buffer_size_, source_.cardinality(), detail::shuffle_seed(seed_, order),
                  by_index);
  }

 private:
  Source source_;
  std::size_t buffer_size_;
  std::uint64_t seed_;
  bool reshuffle_each_iteration_;
};

struct shuffle_adaptor {
  static constexpr bool is_pipeline_adaptor = true;
  std::size_t buffer_size;
  std::uint64_t seed;
  bool reshuffle_each_iteration = true;

  template <dataset Source>
  shuffle_dataset<Source> operator()(Source source) const {
    return shuffle_dataset<Source>(std::move(source), buffer_size, seed, reshuffle_each_iteration);
  }
};

// Throws std::invalid_argument for a buffer of 0 elements, which could hold nothing.
inline shuffle_adaptor shuffle(std::size_t buffer_size, std::uint64_t seed, bool reshuffle_each_iteration = true) {
  if (buffer_size == 0)
    throw std::invalid_argument("shuffle(buffer_size, seed): buffer_size must be at least 1 (1 keeps the order)");
  return {buffer_size, seed, reshuffle_each_iteration};
}

}  // namespace typeflow::data

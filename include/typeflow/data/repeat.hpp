// repeat(n), repeat(): the source n times over, or forever, like tf.data's
// Dataset.repeat.
//
//   source | repeat(n)    element_type: the source's; cardinality n * the source's
//   source | repeat()     cardinality infinite (-2), or 0 for an empty source
//
// Each repetition opens a new pass over the source with its own epoch number,
// so a shuffle before repeat reshuffles every repetition: repetition r of
// epoch e opens the source at epoch e * n + r (repeat(n)), or e * 2^32 + r
// (repeat()). repeat(n) of epoch 0 therefore sees the source's epochs 0..n-1,
// as n separate passes would. A repetition that yields nothing ends the pass,
// so repeat() of an empty dataset is empty rather than a busy loop.
// n < 0 throws std::invalid_argument.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"

namespace typeflow::data {

namespace detail {
inline constexpr std::int64_t repeat_forever = -1;
}

template <dataset Source>
class repeat_dataset {
 public:
  using element_type = typename Source::element_type;
  static constexpr std::int64_t forever = detail::repeat_forever;

  repeat_dataset(Source source, std::int64_t count) : source_(std::move(source)), count_(count) {}

  std::int64_t cardinality() const {
    const std::int64_t n = source_.cardinality();
    if (count_ == 0 || n == 0) return 0;
    if (count_ == forever) return infinite_cardinality;
    return n < 0 ? n : n * count_;
  }

  class cursor {
   public:
    bool next(element_type& out) {
      while (current_) {
        if (current_->next(out)) {
          yielded_ = true;
          return true;
        }
        current_.reset();  // ends this repetition's pass (and its threads) before the next opens
        ++repetition_;
        if (!yielded_ || (count_ != forever && repetition_ >= count_)) break;
        yielded_ = false;
        current_.emplace(source_.open(source_epoch()));
      }
      return false;
    }

   private:
    friend class repeat_dataset;
    cursor(Source source, std::int64_t count, std::uint64_t epoch)
        : source_(std::move(source)), count_(count), epoch_(epoch) {
      if (count_ != 0) current_.emplace(source_.open(source_epoch()));
    }

    std::uint64_t source_epoch() const {
      const auto r = static_cast<std::uint64_t>(repetition_);
      return count_ == forever ? (epoch_ << 32) + r : epoch_ * static_cast<std::uint64_t>(count_) + r;
    }

    Source source_;  // a copy, to reopen: datasets are cheap to copy
    std::int64_t count_;
    std::uint64_t epoch_;
    std::int64_t repetition_ = 0;
    bool yielded_ = false;
    std::optional<cursor_t<Source>> current_;
  };

  cursor open(std::uint64_t epoch = 0) const { return cursor(source_, count_, epoch); }

 private:
  Source source_;
  std::int64_t count_;
};

struct repeat_adaptor {
  static constexpr bool is_pipeline_adaptor = true;
  std::int64_t count;

  template <dataset Source>
  repeat_dataset<Source> operator()(Source source) const {
    return repeat_dataset<Source>(std::move(source), count);
  }
};

// repeat(): forever.
inline repeat_adaptor repeat() { return {detail::repeat_forever}; }
inline repeat_adaptor repeat(std::int64_t count) {
  if (count < 0)
    throw std::invalid_argument("repeat(n): n must be at least 0 (repeat() repeats forever); got " +
                                std::to_string(count));
  return {count};
}

}  // namespace typeflow::data

// lm_windows<T>(tokens, stride): a language model's training examples, cut
// from one long sequence of token ids.
//
//   lm_windows<T>(tokens)            windows at 0, T, 2T, ... (stride = T: no overlap)
//   lm_windows<T>(tokens, stride)    windows at 0, stride, 2 * stride, ...
//   element_type = example<tensor_value<std::int32_t, shape<T>>,    inputs   tokens[s .. s + T)
//                          tensor_value<std::int32_t, shape<T>>>    targets  tokens[s + 1 .. s + T + 1)
//   cardinality  = (n - T - 1) / stride + 1 windows for n >= T + 1 tokens, else 0
//
// The targets are the inputs shifted by one: at every position the model
// learns to predict the next token. A window needs T + 1 tokens, so the last
// tokens that do not fill one are left out. tokens is a vector of ids or a
// text_file (whose bytes are shared, not copied). T < 1 is a compile error;
// stride < 1 throws std::invalid_argument.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "typeflow/core/shape.hpp"
#include "typeflow/data/example.hpp"
#include "typeflow/data/text_file.hpp"

namespace typeflow::data {

template <int T>
class lm_windows_dataset {
  static_assert(T > 0, "lm_windows<T>: the sequence length T must be positive");

 public:
  using sequence = tensor_value<std::int32_t, shape<T>>;  // (T) token ids
  using element_type = example<sequence, sequence>;

  lm_windows_dataset(std::shared_ptr<const std::vector<std::int32_t>> tokens, std::int64_t stride)
      : tokens_(std::move(tokens)), stride_(stride) {
    if (stride < 1)
      throw std::invalid_argument("lm_windows<T>(tokens, stride): stride must be at least 1; got " +
                                  std::to_string(stride));
  }

  std::int64_t cardinality() const noexcept {
    const auto n = static_cast<std::int64_t>(tokens_->size());
    return n >= T + 1 ? (n - T - 1) / stride_ + 1 : 0;
  }
  bool random_access() const noexcept { return true; }

  class cursor {
   public:
    bool next(element_type& out) noexcept {
      if (left_ <= 0) return false;
      const std::int32_t* window = tokens_->data() + start_;
      std::copy_n(window, T, out.features.data());
      std::copy_n(window + 1, T, out.label.data());
      start_ += static_cast<std::size_t>(stride_);
      --left_;
      return true;
    }

    // Window `index` (0 <= index < cardinality()).
    void read_at(std::int64_t index, element_type& out) const noexcept {
      const std::int32_t* window = tokens_->data() + static_cast<std::size_t>(index * stride_);
      std::copy_n(window, T, out.features.data());
      std::copy_n(window + 1, T, out.label.data());
    }

   private:
    friend class lm_windows_dataset;
    cursor(std::shared_ptr<const std::vector<std::int32_t>> tokens, std::int64_t stride, std::int64_t count)
        : tokens_(std::move(tokens)), stride_(stride), left_(count) {}
    std::shared_ptr<const std::vector<std::int32_t>> tokens_;
    std::int64_t stride_;
    std::int64_t left_;
    std::size_t start_ = 0;
  };

  cursor open(std::uint64_t /*epoch*/ = 0) const { return cursor(tokens_, stride_, cardinality()); }

 private:
  std::shared_ptr<const std::vector<std::int32_t>> tokens_;
  std::int64_t stride_;
};

template <int T>
lm_windows_dataset<T> lm_windows(std::vector<std::int32_t> tokens, std::int64_t stride = T) {
  return {std::make_shared<const std::vector<std::int32_t>>(std::move(tokens)), stride};
}

template <int T>
lm_windows_dataset<T> lm_windows(const text_file_dataset<std::int32_t>& text, std::int64_t stride = T) {
  return {text.shared_tokens(), stride};
}

}  // namespace typeflow::data

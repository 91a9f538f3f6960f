// text_file(path): a file's bytes, one element per byte, for byte-level
// language models (a "vocabulary" of the 256 byte values).
//
//   text_file(path)                  element_type = std::int32_t   token ids 0..255
//   text_file<std::uint8_t>(path)    element_type = std::uint8_t   the raw bytes
//   cardinality = the file's size in bytes
//
// The file is read whole, once, at construction; every copy of the dataset
// and every cursor share it. tokens() gives all of it at once, which is what
// lm_windows<T> cuts into training sequences. A missing or unreadable file is
// a std::runtime_error naming it (and the offset where reading failed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "typeflow/data/example.hpp"
#include "typeflow/data/read_file.hpp"

namespace typeflow::data {

template <class Token = std::int32_t>
class text_file_dataset {
  static_assert(std::is_same_v<Token, std::int32_t> || std::is_same_v<Token, std::uint8_t>,
                "text_file<Token>: Token must be std::int32_t (token ids) or std::uint8_t (bytes)");

 public:
  using element_type = Token;

  explicit text_file_dataset(const std::filesystem::path& path) : tokens_(load(path)) {}

  std::int64_t cardinality() const noexcept { return static_cast<std::int64_t>(tokens_->size()); }

  // The whole file, one token per byte.
  const std::vector<Token>& tokens() const noexcept { return *tokens_; }
  std::shared_ptr<const std::vector<Token>> shared_tokens() const noexcept { return tokens_; }

  class cursor {
   public:
    bool next(element_type& out) noexcept {
      if (index_ >= tokens_->size()) return false;
      out = (*tokens_)[index_++];
      return true;
    }

   private:
    friend class text_file_dataset;
    explicit cursor(std::shared_ptr<const std::vector<Token>> tokens) : tokens_(std::move(tokens)) {}
    std::shared_ptr<const std::vector<Token>> tokens_;
    std::size_t index_ = 0;
  };

  cursor open(std::uint64_t /*epoch*/ = 0) const { return cursor(tokens_); }

 private:
  static std::shared_ptr<const std::vector<Token>> load(const std::filesystem::path& path) {
    std::vector<std::uint8_t> bytes = read_file_bytes(path);
    if constexpr (std::is_same_v<Token, std::uint8_t>) {
      return std::make_shared<const std::vector<Token>>(std::move(bytes));
    } else {
      return std::make_shared<const std::vector<Token>>(bytes.begin(), bytes.end());
    }
  }

  std::shared_ptr<const std::vector<Token>> tokens_;
};

template <class Token = std::int32_t>
text_file_dataset<Token> text_file(const std::filesystem::path& path) {
  return text_file_dataset<Token>(path);
}

}  // namespace typeflow::data

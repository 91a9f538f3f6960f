// char_tokenizer, byte_tokenizer: character-level tokenizers for small
// language models (nanoGPT's shakespeare_char).
//
//   char_tokenizer chars(text);          vocabulary: the distinct bytes of text, sorted
//   chars.encode("to be")                std::vector<std::int32_t>, one id per byte
//   chars.decode(ids)                    std::string
//   chars.vocab_size()                   the number of distinct bytes
//   chars.vocabulary()                   the vocabulary's bytes in id order, to save;
//   char_tokenizer::from_vocabulary(v)   rebuilds the same tokenizer from them
//
//   byte_tokenizer bytes;                all 256 bytes, id = byte value (text_file's ids)
//
// Both are byte-level: a "character" is one byte, so a UTF-8 character outside
// ASCII is several ids (nanoGPT's Python version works on code points instead;
// the two agree on ASCII text). Byte-level needs no UTF-8 validation and
// decode(encode(s)) == s for every s the vocabulary covers.
//
// encode throws std::invalid_argument for a byte the vocabulary lacks, naming
// it (printable, or as \xNN) and its byte offset in the input; decode throws
// std::invalid_argument for an id out of range, naming it and its position.
// Both are const and keep no state: one tokenizer can serve several threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace typeflow::text {

namespace detail {

// 'a' or \xNN: a byte as a message can show it whatever the terminal.
inline std::string describe_byte(unsigned char byte) {
  if (byte >= 0x20 && byte < 0x7F) return std::string{'\'', static_cast<char>(byte), '\''};
  constexpr char digits[] = "0123456789ABCDEF";
  return std::string{'\\', 'x', digits[byte >> 4], digits[byte & 0xF]};
}

[[noreturn]] inline void throw_id_out_of_range(const char* who, std::int32_t id, std::size_t position,
                                               std::size_t vocab_size) {
  throw std::invalid_argument(std::string(who) + ": id " + std::to_string(id) + " at position " +
                              std::to_string(position) + " is out of range: the vocabulary has ids 0 to " +
                              std::to_string(vocab_size - 1));
}

}  // namespace detail

class char_tokenizer {
 public:
  // The vocabulary is every byte that occurs in training_text, in increasing
  // byte order (as sorted(set(text)) does for ASCII text).
  explicit char_tokenizer(std::string_view training_text) {
    std::array<bool, 256> seen{};
    for (char c : training_text) seen[static_cast<unsigned char>(c)] = true;
    std::string vocabulary;
    for (int byte = 0; byte < 256; ++byte)
      if (seen[byte]) vocabulary.push_back(static_cast<char>(byte));
    if (vocabulary.empty())
      throw std::invalid_argument("char_tokenizer: the training text is empty, so there is no vocabulary");
    set_vocabulary(vocabulary);
  }

  // The tokenizer whose vocabulary() is `vocabulary`: id i is vocabulary[i].
  // The bytes must be distinct; any order is kept as given.
  static char_tokenizer from_vocabulary(std::string_view vocabulary) {
    if (vocabulary.empty()) throw std::invalid_argument("char_tokenizer::from_vocabulary: the vocabulary is empty");
    std::array<bool, 256> seen{};
    for (std::size_t i = 0; i < vocabulary.size(); ++i) {
      const auto byte = static_cast<unsigned char>(vocabulary[i]);
      if (seen[byte])
        throw std::invalid_argument("char_tokenizer::from_vocabulary: the byte " + detail::describe_byte(byte) +
                                    " at offset " + std::to_string(i) + " occurs twice in the vocabulary");
      seen[byte] = true;
    }
    char_tokenizer tokenizer;
    tokenizer.set_vocabulary(vocabulary);
    return tokenizer;
  }

  std::size_t vocab_size() const noexcept { return vocabulary_.size(); }

  // The vocabulary's bytes in id order: save this string to rebuild the
  // tokenizer with from_vocabulary.
  const std::string& vocabulary() const noexcept { return vocabulary_; }

  std::vector<std::int32_t> encode(std::string_view text) const {
    std::vector<std::int32_t> ids(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
      const auto byte = static_cast<unsigned char>(text[i]);
      const std::int32_t id = id_of_[byte];
      if (id < 0)
        throw std::invalid_argument("char_tokenizer::encode: the character " + detail::describe_byte(byte) +
                                    " at byte offset " + std::to_string(i) + " is not in the vocabulary (" +
                                    std::to_string(vocabulary_.size()) + " characters)");
      ids[i] = id;
    }
    return ids;
  }

  std::string decode(std::span<const std::int32_t> ids) const {
    std::string text(ids.size(), '\0');
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || static_cast<std::size_t>(ids[i]) >= vocabulary_.size())
        detail::throw_id_out_of_range("char_tokenizer::decode", ids[i], i, vocabulary_.size());
      text[i] = vocabulary_[static_cast<std::size_t>(ids[i])];
    }
    return text;
  }

 private:
  char_tokenizer() = default;

  void set_vocabulary(std::string_view vocabulary) {
    vocabulary_.assign(vocabulary);
    id_of_.fill(-1);
    for (std::size_t i = 0; i < vocabulary.size(); ++i)
      id_of_[static_cast<unsigned char>(vocabulary[i])] = static_cast<std::int32_t>(i);
  }

  std::string vocabulary_;               // id -> byte
  std::array<std::int32_t, 256> id_of_;  // byte -> id, -1 where the byte is not in the vocabulary
};

// Every byte is its own id, 0..255: the ids data::text_file gives, as a
// tokenizer. Nothing can be out of vocabulary; decode still checks the ids.
class byte_tokenizer {
 public:
  static constexpr std::size_t vocab_size() noexcept { return 256; }

  std::vector<std::int32_t> encode(std::string_view text) const {
    std::vector<std::int32_t> ids(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }

  std::string decode(std::span<const std::int32_t> ids) const {
    std::string text(ids.size(), '\0');
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] > 255) detail::throw_id_out_of_range("byte_tokenizer::decode", ids[i], i, 256);
      text[i] = static_cast<char>(static_cast<unsigned char>(ids[i]));
    }
    return text;
  }
};

}  // namespace typeflow::text

// What the two GPT-2 tokenizer fuzz targets share: an independent UTF-8
// check, and the round-trip property.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <typeflow/text/gpt2_tokenizer.hpp>

#include "fuzz_support.hpp"

namespace typeflow::fuzz {

// Whether text is valid UTF-8 (RFC 3629), decoded code point by code point:
// written apart from gpt2_tokenizer's own check, so that the two check each other.
inline bool valid_utf8(std::string_view text) {
  static constexpr std::uint32_t smallest[5] = {0, 0, 0x80, 0x800, 0x10000};  // by sequence length
  for (std::size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    std::size_t length = 0;
    std::uint32_t code_point = 0;
    if (lead < 0x80) {
      ++i;
      continue;
    }
    if ((lead >> 5) == 0b110) length = 2, code_point = lead & 0x1F;
    else if ((lead >> 4) == 0b1110) length = 3, code_point = lead & 0x0F;
    else if ((lead >> 3) == 0b11110) length = 4, code_point = lead & 0x07;
    else return false;
    if (i + length > text.size()) return false;
    for (std::size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next >> 6) != 0b10) return false;
      code_point = code_point << 6 | (next & 0x3F);
    }
    if (code_point < smallest[length] || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF))
      return false;
    i += length;
  }
  return true;
}

// encode refuses (std::invalid_argument) exactly the texts that are not
// valid UTF-8; for the others, every id is in the vocabulary, a second
// encode (a cache hit) gives the same ids, and decode gives the text back.
inline void check_round_trip(const text::gpt2_tokenizer& tokenizer, std::string_view input) {
  const bool valid = valid_utf8(input);
  std::vector<std::int32_t> ids;
  try {
    ids = tokenizer.encode(input);
  } catch (const std::invalid_argument& error) {
    require(!valid, std::string("gpt2_tokenizer::encode refused valid UTF-8: ") + error.what());
    return;
  }
  require(valid, "gpt2_tokenizer::encode accepted text that is not valid UTF-8");
  for (std::int32_t id : ids)
    require(id >= 0 && static_cast<std::size_t>(id) < tokenizer.vocab_size(),
            "gpt2_tokenizer::encode gave the id " + std::to_string(id) + ", outside the vocabulary");
  require(tokenizer.encode(input) == ids, "gpt2_tokenizer::encode gave other ids the second time");
  require(tokenizer.decode(ids) == input, "gpt2_tokenizer: decode(encode(text)) != text");
}

}  // namespace typeflow::fuzz

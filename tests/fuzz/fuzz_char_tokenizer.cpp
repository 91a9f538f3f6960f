// Fuzz target: text::char_tokenizer and text::byte_tokenizer
// (include/typeflow/text/char_tokenizer.hpp).
//
// The input is two parts (fuzz_support.hpp's split_two): the training text
// that makes the char tokenizer's vocabulary, then a text to encode. Then:
//   - encode refuses (std::invalid_argument) exactly the texts with a byte
//     outside the vocabulary, and otherwise decode(encode(text)) == text;
//   - from_vocabulary(vocabulary()) is the same tokenizer;
//   - byte_tokenizer round-trips every text;
//   - decode of the text read as int32 ids refuses exactly the ids out of range.
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include <typeflow/text/char_tokenizer.hpp>

#include "fuzz_support.hpp"

namespace text = typeflow::text;
namespace fz = typeflow::fuzz;

namespace {

// Whether decode accepted ids exactly when all of them are below vocab_size.
template <class Tokenizer>
void check_decode(const Tokenizer& tokenizer, const std::vector<std::int32_t>& ids, std::size_t vocab_size) {
  bool in_range = true;
  for (std::int32_t id : ids) in_range = in_range && id >= 0 && static_cast<std::size_t>(id) < vocab_size;
  try {
    const std::string decoded = tokenizer.decode(ids);
    fz::require(in_range && decoded.size() == ids.size(), "decode accepted an id out of range");
  } catch (const std::invalid_argument&) {
    fz::require(!in_range, "decode refused ids that are all in range");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto [training, input] = fz::split_two(data, size);

  const text::byte_tokenizer bytes;
  fz::require(bytes.decode(bytes.encode(input)) == input, "byte_tokenizer does not round-trip");
  std::vector<std::int32_t> ids(input.size() / 4);
  if (!ids.empty()) std::memcpy(ids.data(), input.data(), ids.size() * 4);
  check_decode(bytes, ids, 256);

  if (training.empty()) {
    try {
      (void)text::char_tokenizer(training);
      fz::fail("char_tokenizer accepted an empty training text");
    } catch (const std::invalid_argument&) {
    }
    return 0;
  }
  const text::char_tokenizer chars(training);
  std::array<bool, 256> known{};
  for (char c : training) known[static_cast<unsigned char>(c)] = true;
  bool covered = true;
  for (char c : input) covered = covered && known[static_cast<unsigned char>(c)];
  try {
    const auto encoded = chars.encode(input);
    fz::require(covered, "char_tokenizer::encode accepted a byte outside its vocabulary");
    fz::require(chars.decode(encoded) == input, "char_tokenizer does not round-trip");
  } catch (const std::invalid_argument&) {
    fz::require(!covered, "char_tokenizer::encode refused a text its vocabulary covers");
  }
  const auto rebuilt = text::char_tokenizer::from_vocabulary(chars.vocabulary());
  fz::require(rebuilt.vocabulary() == chars.vocabulary() && rebuilt.encode(chars.vocabulary()) == chars.encode(chars.vocabulary()),
              "from_vocabulary(vocabulary()) is another tokenizer");
  check_decode(chars, ids, chars.vocab_size());

  // from_vocabulary refuses exactly the vocabularies with a repeated byte.
  std::array<int, 256> seen{};
  bool repeated = false;
  for (char c : training) repeated = repeated || seen[static_cast<unsigned char>(c)]++ > 0;
  try {
    (void)text::char_tokenizer::from_vocabulary(training);
    fz::require(!repeated, "from_vocabulary accepted a repeated byte");
  } catch (const std::invalid_argument&) {
    fz::require(repeated, "from_vocabulary refused distinct bytes");
  }
  return 0;
}

// Fuzz target: gpt2_tokenizer::load, its encoder.json and vocab.bpe readers
// (include/typeflow/text/gpt2_tokenizer.hpp).
//
// The input is two files (fuzz_support.hpp's split_two): encoder.json, then
// vocab.bpe. Every refusal is a std::runtime_error naming the file at fault.
// A vocabulary that loads must round-trip text as GPT-2's own does: a fixed
// sentence, and the input itself when it is valid UTF-8.
#include <optional>

#include "gpt2_fuzz_support.hpp"

namespace fz = typeflow::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto [encoder, merges] = fz::split_two(data, size);
  const auto encoder_path = fz::write_scratch("vocabulary/encoder.json", encoder);
  const auto merges_path = fz::write_scratch("vocabulary/vocab.bpe", merges);

  std::optional<typeflow::text::gpt2_tokenizer> tokenizer;
  try {
    tokenizer.emplace(typeflow::text::gpt2_tokenizer::load(encoder_path.parent_path()));
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    fz::require(message.find("encoder.json") != std::string::npos || message.find("vocab.bpe") != std::string::npos,
                "the refusal names neither encoder.json nor vocab.bpe: " + message);
    return 0;
  }
  fz::require(tokenizer->vocab_size() >= 256, "a vocabulary without all 256 bytes loaded");
  fz::check_round_trip(*tokenizer, "Call me Ishmael. Some years ago\xE2\x80\x94never mind how long, 1851!\n\t ");
  fz::check_round_trip(*tokenizer, std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}

// Fuzz target: gpt2_tokenizer::encode and decode with GPT-2's own vocabulary
// (include/typeflow/text/gpt2_tokenizer.hpp; data/gpt2 from scripts/setup.sh's
// setup_gpt2_bpe, or $TYPEFLOW_DATA_DIR/gpt2).
//
// The input is a text: decode(encode(text)) == text for every valid UTF-8
// text, and encode refuses exactly the others (gpt2_fuzz_support.hpp). The
// same bytes read as int32 ids: decode refuses exactly the ids out of range.
#include <cstdlib>
#include <cstring>
#include <memory>

#include "gpt2_fuzz_support.hpp"

namespace fz = typeflow::fuzz;

namespace {

std::unique_ptr<typeflow::text::gpt2_tokenizer> tokenizer;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* root = std::getenv("TYPEFLOW_DATA_DIR");
  const std::filesystem::path dir = std::filesystem::path(root ? root : TYPEFLOW_FUZZ_DATA_DIR) / "gpt2";
  try {
    tokenizer = std::make_unique<typeflow::text::gpt2_tokenizer>(typeflow::text::gpt2_tokenizer::load(dir));
  } catch (const std::exception& error) {
    fz::fail(std::string("cannot load GPT-2's vocabulary (scripts/setup.sh's setup_gpt2_bpe fetches it): ") +
             error.what());
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  fz::check_round_trip(*tokenizer, input);

  std::vector<std::int32_t> ids(size / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
  bool in_range = true;
  for (std::int32_t id : ids) in_range = in_range && id >= 0 && static_cast<std::size_t>(id) < tokenizer->vocab_size();
  try {
    (void)tokenizer->decode(ids);
    fz::require(in_range, "gpt2_tokenizer::decode accepted an id out of range");
  } catch (const std::invalid_argument&) {
    fz::require(!in_range, "gpt2_tokenizer::decode refused ids that are all in range");
  }
  return 0;
}

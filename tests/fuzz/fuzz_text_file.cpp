// Fuzz target: data::text_file (include/typeflow/data/text_file.hpp).
//
// The input is the file. Both token types must give its bytes back, one
// token per byte, through tokens() and through a cursor.
#include <cstdint>
#include <optional>

#include <typeflow/data/text_file.hpp>

#include "fuzz_support.hpp"

namespace data = typeflow::data;
namespace fz = typeflow::fuzz;

namespace {

template <class Token>
void read(const std::filesystem::path& path, const std::uint8_t* bytes, std::size_t size) {
  std::optional<data::text_file_dataset<Token>> text;
  if (!fz::refused_or_read(path, [&] { text.emplace(data::text_file<Token>(path)); }))
    fz::fail("text_file refused a readable file");
  fz::require(text->cardinality() == static_cast<std::int64_t>(size), "text_file's cardinality is not the file's size");
  auto cursor = text->open();
  Token token{};
  std::size_t at = 0;
  while (cursor.next(token)) {
    if (at >= size || token != static_cast<Token>(bytes[at]) || text->tokens()[at] != token)
      fz::fail("text_file's token " + std::to_string(at) + " is not the file's byte");
    ++at;
  }
  fz::require(at == size, "text_file's cursor ended early");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = fz::write_scratch("corpus.txt", data, size);
  read<std::int32_t>(path, data, size);
  read<std::uint8_t>(path, data, size);
  return 0;
}

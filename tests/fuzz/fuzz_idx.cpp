// Fuzz target: data::read_idx on an uncompressed file (include/typeflow/data/idx.hpp).
//
// The input is the file. It is read twice: as the element type and rank its
// own magic number names (so that most inputs pass the magic check and reach
// the dims), and as MNIST's images (uint8, rank 3). An accepted file's dims
// multiply to its element count, and its bytes are the file after the header.
#include <cstring>
#include <optional>

#include <typeflow/data/idx.hpp>

#include "fuzz_support.hpp"

namespace data = typeflow::data;
namespace fz = typeflow::fuzz;

namespace {

void read_as(const std::filesystem::path& path, const std::uint8_t* file, std::size_t size, std::uint8_t type,
             int rank) {
  std::optional<data::idx_array> array;
  if (!fz::refused_or_read(path, [&] { array.emplace(data::read_idx(path, type, rank)); })) return;
  fz::require(array->dims.size() == static_cast<std::size_t>(rank), "read_idx gave another rank");
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(rank);
  fz::require(array->bytes.size() == array->count() * data::detail::idx_element_bytes(type),
              "read_idx's bytes do not match its dims");
  fz::require(header + array->bytes.size() == size &&
                  fz::same_bytes(array->bytes.data(), file + header, array->bytes.size()),
              "read_idx's bytes are not the file after its header");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = fz::write_scratch("images-idx3-ubyte", data, size);
  if (size >= 4 && data::detail::idx_element_bytes(data[2]) != 0) read_as(path, data, size, data[2], data[3]);
  read_as(path, data, size, data::idx_type::uint8, 3);
  return 0;
}

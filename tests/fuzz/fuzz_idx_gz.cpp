// Fuzz target: data::read_idx on a gzip-compressed file, and the gzip reader
// under it, data::read_gzip_file (include/typeflow/data/idx.hpp, read_file.hpp).
//
// The input's first byte chooses the mode; the rest is the payload.
//   bit 0 clear: the payload is the .gz file itself (hostile gzip streams);
//   bit 0 set:   the payload is gzip-compressed here first, so that the IDX
//                checks behind the decompression see every input, and
//                read_gzip_file must give the payload back exactly;
//   bit 1:       read_idx is given "<name>" and must find "<name>.gz" itself.
// read_idx reads as the element type and rank the decompressed magic number
// names, like fuzz_idx.cpp.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <zlib.h>

#include <typeflow/data/idx.hpp>

#include "fuzz_support.hpp"

namespace data = typeflow::data;
namespace fz = typeflow::fuzz;

namespace {

std::vector<std::uint8_t> gzip(const std::uint8_t* bytes, std::size_t size) {
  z_stream stream{};
  if (deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    fz::fail("deflateInit2 failed");
  std::vector<std::uint8_t> out(deflateBound(&stream, size) + 32);
  stream.next_in = const_cast<Bytef*>(bytes);
  stream.avail_in = static_cast<uInt>(size);
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  if (deflate(&stream, Z_FINISH) != Z_STREAM_END) fz::fail("deflate did not finish");
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  const std::uint8_t* payload = data + 1;
  const std::size_t payload_size = size - 1;
  const bool compress_here = mode & 1, find_gz = mode & 2;

  std::filesystem::remove(fz::scratch_dir() / "labels-idx1-ubyte");  // a plain file would be read instead
  std::filesystem::path path;
  if (compress_here) {
    const std::vector<std::uint8_t> compressed = gzip(payload, payload_size);
    path = fz::write_scratch("labels-idx1-ubyte.gz", compressed.data(), compressed.size());
  } else {
    path = fz::write_scratch("labels-idx1-ubyte.gz", payload, payload_size);
  }

  std::vector<std::uint8_t> decompressed;
  const bool inflated = fz::refused_or_read(path, [&] { decompressed = data::read_gzip_file(path); });
  if (compress_here)
    fz::require(inflated && decompressed.size() == payload_size &&
                    fz::same_bytes(decompressed.data(), payload, payload_size),
                "read_gzip_file did not give back what zlib compressed");

  std::uint8_t type = data::idx_type::uint8;
  int rank = 1;
  if (inflated && decompressed.size() >= 4 && data::detail::idx_element_bytes(decompressed[2]) != 0) {
    type = decompressed[2];
    rank = decompressed[3];
  }
  const std::filesystem::path asked = find_gz ? path.parent_path() / path.stem() : path;
  std::optional<data::idx_array> array;
  if (!fz::refused_or_read(path, [&] { array.emplace(data::read_idx(asked, type, rank)); })) return 0;
  fz::require(inflated, "read_idx accepted a file that read_gzip_file refused");
  fz::require(array->file == path && array->compressed, "read_idx did not read the .gz file");
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(rank);
  fz::require(array->bytes.size() == array->count() * data::detail::idx_element_bytes(type) &&
                  header + array->bytes.size() == decompressed.size() &&
                  fz::same_bytes(array->bytes.data(), decompressed.data() + header, array->bytes.size()),
              "read_idx's bytes are not the decompressed file after its header");
  return 0;
}

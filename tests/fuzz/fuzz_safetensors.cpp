// Fuzz target: io::safetensors_file::read (include/typeflow/io/safetensors.hpp).
//
// The input is a whole file. A file the reader accepts must be consistent:
// each tensor's bytes are product(shape) * dtype size and lie inside the
// file, and writing the tensors back with write_safetensors and reading that
// gives the same names, dtypes, shapes, bytes and metadata.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <typeflow/io/safetensors.hpp>

#include "fuzz_support.hpp"

namespace io = typeflow::io;
namespace fz = typeflow::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = fz::write_scratch("model.safetensors", data, size);
  std::optional<io::safetensors_file> file;
  if (!fz::refused_or_read(path, [&] { file.emplace(io::safetensors_file::read(path)); })) return 0;

  // The tensors tile the data buffer, which ends the file: in data-offset
  // order, their bytes put together are the file's last bytes.
  std::vector<io::tensor_to_write> back;
  std::string buffer;
  for (const io::tensor_spec& t : file->tensors()) {
    const auto bytes = file->data(t.name);
    const auto expected = io::detail::tensor_byte_size(t.shape, io::dtype_size(t.dtype));
    fz::require(expected && *expected == bytes.size(), "tensor " + t.name + ": its bytes do not match its shape");
    fz::require(file->find(t.name) == &t, "find(" + t.name + ") does not give the listed tensor");
    buffer.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    back.push_back({t.name, t.dtype, t.shape, bytes.data(), bytes.size()});
  }
  fz::require(buffer.size() + 9 <= size, "the tensors hold more bytes than the file minus its header");
  fz::require(fz::same_bytes(buffer.data(), data + size - buffer.size(), buffer.size()),
              "the tensors' bytes are not the end of the file");

  // Empty tensor names are legal to read, and write_safetensors refuses them.
  for (const auto& t : back)
    if (t.name.empty()) return 0;
  const auto copy_path = fz::scratch_dir() / "copy.safetensors";
  io::write_safetensors(copy_path, back, file->metadata());
  const auto copy = io::safetensors_file::read(copy_path);
  fz::require(copy.metadata() == file->metadata(), "the metadata changed in a write and read");
  fz::require(copy.tensors().size() == file->tensors().size(), "the tensor count changed in a write and read");
  for (const io::tensor_spec& t : file->tensors()) {
    const io::tensor_spec* again = copy.find(t.name);
    fz::require(again && *again == t, "tensor " + t.name + " changed in a write and read");
    const auto a = file->data(t.name), b = copy.data(t.name);
    fz::require(a.size() == b.size() && fz::same_bytes(a.data(), b.data(), a.size()),
                "tensor " + t.name + "'s bytes changed in a write and read");
  }
  return 0;
}

// read_idx: the IDX file format of MNIST (LeCun, Cortes & Burges), read whole.
//
// Layout, big-endian throughout:
//   bytes 0-1   zero
//   byte  2     element type: 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32,
//               0x0D float32, 0x0E float64
//   byte  3     rank
//   4 * rank    the dims, uint32 each
//   the rest    prod(dims) elements, row-major
// So MNIST images (uint8, rank 3) start with the magic number 0x00000803 and
// labels (uint8, rank 1) with 0x00000801.
//
// read_idx checks everything the header promises and throws std::runtime_error
// with a message naming the file: missing (with a hint when only a .gz copy is
// there), wrong magic number (expected and found), a header cut short, a file
// shorter or longer than its dims say.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace typeflow::data {

namespace idx_type {
inline constexpr std::uint8_t uint8 = 0x08;
inline constexpr std::uint8_t int8 = 0x09;
inline constexpr std::uint8_t int16 = 0x0B;
inline constexpr std::uint8_t int32 = 0x0C;
inline constexpr std::uint8_t float32 = 0x0D;
inline constexpr std::uint8_t float64 = 0x0E;
}  // namespace idx_type

// One IDX file in memory. Multi-byte elements stay big-endian in `bytes`, as
// in the file; uint8 data (all of MNIST) is usable as is.
struct idx_array {
  std::uint8_t element_type = idx_type::uint8;
  std::vector<std::size_t> dims;   // (d0, d1, ...)
  std::vector<std::uint8_t> bytes;  // (d0 * d1 * ... * element size)

  std::size_t count() const noexcept {
    std::size_t n = 1;
    for (std::size_t d : dims) n *= d;
    return n;
  }
};

namespace detail {

inline std::size_t idx_element_bytes(std::uint8_t element_type) {
  switch (element_type) {
    case idx_type::uint8:
    case idx_type::int8: return 1;
    case idx_type::int16: return 2;
    case idx_type::int32:
    case idx_type::float32: return 4;
    case idx_type::float64: return 8;
    default: return 0;
  }
}

inline const char* idx_element_name(std::uint8_t element_type) {
  switch (element_type) {
    case idx_type::uint8: return "unsigned bytes";
    case idx_type::int8: return "signed bytes";
    case idx_type::int16: return "int16";
    case idx_type::int32: return "int32";
    case idx_type::float32: return "float32";
    case idx_type::float64: return "float64";
    default: return "an unknown element type";
  }
}

inline std::string hex32(std::uint32_t value) {
  constexpr char digits[] = "0123456789ABCDEF";
  std::string out = "0x";
  for (int shift = 28; shift >= 0; shift -= 4) out += digits[(value >> shift) & 0xF];
  return out;
}

inline std::uint32_t read_big_endian_u32(const unsigned char* p) noexcept {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

inline std::string dims_str(const std::vector<std::size_t>& dims) {
  std::string out;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += " x ";
    out += std::to_string(dims[i]);
  }
  return dims.empty() ? "scalar" : out;
}

[[noreturn]] inline void idx_error(const std::filesystem::path& path, const std::string& what) {
  throw std::runtime_error("IDX file " + path.string() + " " + what);
}

}  // namespace detail

// Reads the IDX file at path, which must hold `rank` dims of `element_type`.
inline idx_array read_idx(const std::filesystem::path& path, std::uint8_t element_type, int rank) {
  const std::size_t element_bytes = detail::idx_element_bytes(element_type);
  if (element_bytes == 0 || rank < 0 || rank > 255)
    throw std::invalid_argument("read_idx: element type " + detail::hex32(element_type) +
                                " and rank " + std::to_string(rank) + " are not a valid IDX pair");

  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    std::string what = "was not found";
    std::filesystem::path gz = path;
    gz += ".gz";
    const std::filesystem::path dir = path.parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir, error))
      what += " (the directory " + dir.string() + " does not exist)";
    else if (std::filesystem::exists(gz, error))
      what += "; only the gzip-compressed " + gz.string() +
              " is there, and typeflow reads uncompressed IDX files: run `gunzip -k " +
              gz.string() + "`";
    detail::idx_error(path, what);
  }
  const std::uintmax_t file_bytes = std::filesystem::file_size(path, error);
  std::ifstream in(path, std::ios::binary);
  if (error || !in) detail::idx_error(path, "cannot be opened for reading");

  // Magic number: 0x00 0x00 <element type> <rank>.
  unsigned char magic_bytes[4] = {};
  if (file_bytes < 4 || !in.read(reinterpret_cast<char*>(magic_bytes), 4))
    detail::idx_error(path, "is too short to be an IDX file: it has " + std::to_string(file_bytes) +
                                " bytes and the magic number alone needs 4");
  const std::uint32_t magic = detail::read_big_endian_u32(magic_bytes);
  const std::uint32_t expected_magic = (std::uint32_t{element_type} << 8) | static_cast<std::uint32_t>(rank);
  if (magic != expected_magic)
    detail::idx_error(path, "has a bad magic number: expected " + detail::hex32(expected_magic) + " (" +
                                detail::idx_element_name(element_type) + ", rank " +
                                std::to_string(rank) + ") but found " + detail::hex32(magic) +
                                "; is this the right file, and is it uncompressed?");

  // Dims: rank big-endian uint32s.
  const std::size_t header_bytes = 4 + 4 * static_cast<std::size_t>(rank);
  std::vector<unsigned char> dim_bytes(4 * static_cast<std::size_t>(rank));
  if (file_bytes < header_bytes ||
      !in.read(reinterpret_cast<char*>(dim_bytes.data()), static_cast<std::streamsize>(dim_bytes.size())))
    detail::idx_error(path, "is truncated inside its header: a rank-" + std::to_string(rank) +
                                " header needs " + std::to_string(header_bytes) +
                                " bytes but the file has " + std::to_string(file_bytes));

  idx_array out;
  out.element_type = element_type;
  std::size_t payload_bytes = element_bytes;
  for (int axis = 0; axis < rank; ++axis) {
    const std::size_t dim = detail::read_big_endian_u32(dim_bytes.data() + 4 * axis);
    out.dims.push_back(dim);
    if (dim != 0 && payload_bytes > std::numeric_limits<std::size_t>::max() / dim)
      detail::idx_error(path, "has dims in its header that do not fit in memory");
    payload_bytes *= dim;
  }

  const std::uintmax_t expected_bytes = header_bytes + payload_bytes;
  const std::string described = "its header (" + detail::dims_str(out.dims) + " " +
                                detail::idx_element_name(element_type) + ") says the file is " +
                                std::to_string(expected_bytes) + " bytes";
  if (file_bytes < expected_bytes)
    detail::idx_error(path, "is truncated: " + described + " but it has " + std::to_string(file_bytes) +
                                " bytes; the data ends at byte " + std::to_string(file_bytes) +
                                ", in element " + std::to_string((file_bytes - header_bytes) / element_bytes) +
                                " of " + std::to_string(out.count()));
  if (file_bytes > expected_bytes)
    detail::idx_error(path, "is too long: " + described + " but it has " + std::to_string(file_bytes) +
                                " bytes (" + std::to_string(file_bytes - expected_bytes) +
                                " bytes after the data)");

  out.bytes.resize(payload_bytes);
  if (!in.read(reinterpret_cast<char*>(out.bytes.data()), static_cast<std::streamsize>(payload_bytes)))
    detail::idx_error(path, "could not be read to the end (read error after byte " +
                                std::to_string(header_bytes + static_cast<std::size_t>(in.gcount())) + ")");
  return out;
}

}  // namespace typeflow::data

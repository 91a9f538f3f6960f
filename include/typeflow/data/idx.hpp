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
// read_idx(path) reads path itself or, when only path + ".gz" is there (or path
// ends in .gz), decompresses that with zlib. It checks everything the header
// promises and throws std::runtime_error with a message naming the file:
// missing, wrong magic number (expected and found), a header cut short, a file
// shorter or longer than its dims say (with the byte offset where the data
// ends), and for a .gz file, a corrupt or truncated gzip stream (with the
// compressed byte offset; see read_file.hpp). Offsets in the IDX checks of a
// .gz file count decompressed bytes, and the message says so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "typeflow/data/read_file.hpp"

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
  std::filesystem::path file;       // the file read: the path asked for, or it + ".gz"
  bool compressed = false;          // file was gzip; offsets then count decompressed bytes

  // How to name the file in a message about a byte offset in `bytes`.
  std::string described() const { return file.string() + (compressed ? " (decompressed)" : ""); }

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

[[noreturn]] inline void idx_error(const std::string& file, const std::string& what) {
  throw std::runtime_error("IDX file " + file + " " + what);
}

// What the header says, once checked against the file's size.
struct idx_header {
  std::vector<std::size_t> dims;
  std::size_t header_bytes = 0;
  std::size_t payload_bytes = 0;
};

// Checks the header at `bytes` (available of the file's total_bytes; the
// whole header when the file holds one) against element_type, rank and the size.
inline idx_header check_idx_header(const unsigned char* bytes, std::size_t available, std::uintmax_t total_bytes,
                                   const std::string& file, std::uint8_t element_type, int rank) {
  const std::size_t element_bytes = idx_element_bytes(element_type);

  // Magic number: 0x00 0x00 <element type> <rank>.
  if (total_bytes < 4 || available < 4)
    idx_error(file, "is too short to be an IDX file: it has " + std::to_string(total_bytes) +
                        " bytes and the magic number alone needs 4");
  const std::uint32_t magic = read_big_endian_u32(bytes);
  const std::uint32_t expected_magic = (std::uint32_t{element_type} << 8) | static_cast<std::uint32_t>(rank);
  if (magic != expected_magic)
    idx_error(file, "has a bad magic number: expected " + hex32(expected_magic) + " (" +
                        idx_element_name(element_type) + ", rank " + std::to_string(rank) + ") but found " +
                        hex32(magic) +
                        ((magic >> 16) == 0x1F8B ? "; it looks gzip-compressed: give it the .gz suffix"
                                                 : "; is this the right file?"));

  // Dims: rank big-endian uint32s.
  idx_header header;
  header.header_bytes = 4 + 4 * static_cast<std::size_t>(rank);
  if (total_bytes < header.header_bytes || available < header.header_bytes)
    idx_error(file, "is truncated inside its header: a rank-" + std::to_string(rank) + " header needs " +
                        std::to_string(header.header_bytes) + " bytes but the file has " +
                        std::to_string(total_bytes));
  header.payload_bytes = element_bytes;
  for (int axis = 0; axis < rank; ++axis) {
    const std::size_t dim = read_big_endian_u32(bytes + 4 + 4 * axis);
    header.dims.push_back(dim);
    if (dim != 0 && header.payload_bytes > std::numeric_limits<std::size_t>::max() / dim)
      idx_error(file, "has dims in its header that do not fit in memory");
    header.payload_bytes *= dim;
  }

  std::size_t count = 1;
  for (std::size_t d : header.dims) count *= d;
  const std::uintmax_t expected_bytes = header.header_bytes + header.payload_bytes;
  const std::string described = "its header (" + dims_str(header.dims) + " " + idx_element_name(element_type) +
                                ") says the file is " + std::to_string(expected_bytes) + " bytes";
  if (total_bytes < expected_bytes)
    idx_error(file, "is truncated: " + described + " but it has " + std::to_string(total_bytes) +
                        " bytes; the data ends at byte " + std::to_string(total_bytes) + ", in element " +
                        std::to_string((total_bytes - header.header_bytes) / element_bytes) + " of " +
                        std::to_string(count));
  if (total_bytes > expected_bytes)
    idx_error(file, "is too long: " + described + " but it has " + std::to_string(total_bytes) + " bytes (" +
                        std::to_string(total_bytes - expected_bytes) + " bytes after the data)");
  return header;
}

}  // namespace detail

// Reads the IDX file at path (or path + ".gz"), which must hold `rank` dims of `element_type`.
inline idx_array read_idx(const std::filesystem::path& path, std::uint8_t element_type, int rank) {
  const std::size_t element_bytes = detail::idx_element_bytes(element_type);
  if (element_bytes == 0 || rank < 0 || rank > 255)
    throw std::invalid_argument("read_idx: element type " + detail::hex32(element_type) +
                                " and rank " + std::to_string(rank) + " are not a valid IDX pair");

  idx_array out;
  out.element_type = element_type;
  std::error_code error;
  std::filesystem::path gz = path;
  gz += ".gz";
  if (std::filesystem::is_regular_file(path, error)) {
    out.file = path;
    out.compressed = path.extension() == ".gz";
  } else if (std::filesystem::is_regular_file(gz, error)) {
    out.file = gz;
    out.compressed = true;
  } else {
    std::string what = "was not found, nor " + gz.filename().string();
    const std::filesystem::path dir = path.parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir, error))
      what += " (the directory " + dir.string() + " does not exist)";
    detail::idx_error(path.string(), what);
  }

  if (out.compressed) {
    std::vector<std::uint8_t> bytes = read_gzip_file(out.file);
    const detail::idx_header header =
        detail::check_idx_header(bytes.data(), bytes.size(), bytes.size(), out.described(), element_type, rank);
    out.dims = header.dims;
    bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header.header_bytes));
    out.bytes = std::move(bytes);
    return out;
  }

  // Uncompressed: check the header against the file's size before reading the data.
  const std::uintmax_t file_bytes = std::filesystem::file_size(path, error);
  std::ifstream in(path, std::ios::binary);
  if (error || !in) detail::idx_error(path.string(), "cannot be opened for reading");
  std::vector<unsigned char> header_bytes(4 + 4 * static_cast<std::size_t>(rank));
  in.read(reinterpret_cast<char*>(header_bytes.data()), static_cast<std::streamsize>(header_bytes.size()));
  const std::size_t available = static_cast<std::size_t>(in.gcount());
  in.clear();
  const detail::idx_header header =
      detail::check_idx_header(header_bytes.data(), available, file_bytes, path.string(), element_type, rank);
  out.dims = header.dims;
  out.bytes.resize(header.payload_bytes);
  if (!in.read(reinterpret_cast<char*>(out.bytes.data()), static_cast<std::streamsize>(header.payload_bytes)))
    detail::idx_error(path.string(), "could not be read to the end (read error after byte " +
                                         std::to_string(header.header_bytes + static_cast<std::size_t>(in.gcount())) +
                                         ")");
  return out;
}

}  // namespace typeflow::data

// read_file_bytes, read_gzip_file: a whole file into memory, plain or gzip-compressed.
//
//   read_file_bytes(path)   the file's bytes
//   read_gzip_file(path)    the decompressed bytes of a gzip file (zlib;
//                           concatenated gzip members are read one after another)
//
// Sources read their files once, at construction, so both return one vector.
// Every failure is a std::runtime_error that names the file, and for a file
// that is there but wrong, the byte offset: a missing or unreadable file, a
// file that is not gzip (offset 0), corrupt compressed data (the compressed
// offset where zlib stopped, with zlib's reason), a stream cut short (the
// file's size, where the data ends) and bytes after the last gzip member.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace typeflow::data {

namespace detail {

[[noreturn]] inline void file_error(const std::filesystem::path& path, const std::string& what) {
  throw std::runtime_error("file " + path.string() + " " + what);
}

[[noreturn]] inline void gzip_error(const std::filesystem::path& path, const std::string& what) {
  throw std::runtime_error("gzip file " + path.string() + " " + what);
}

inline std::string hex_byte(unsigned value) {
  constexpr char digits[] = "0123456789ABCDEF";
  return {digits[(value >> 4) & 0xF], digits[value & 0xF]};
}

}  // namespace detail

inline std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) detail::file_error(path, "was not found");
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  std::ifstream in(path, std::ios::binary);
  if (error || !in) detail::file_error(path, "cannot be opened for reading");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())))
    detail::file_error(path, "could not be read to the end (read error after byte offset " +
                                 std::to_string(in.gcount()) + " of " + std::to_string(size) + ")");
  return bytes;
}

inline std::vector<std::uint8_t> read_gzip_file(const std::filesystem::path& path) {
  const std::vector<std::uint8_t> compressed = read_file_bytes(path);
  const std::size_t total = compressed.size();
  const auto is_member_start = [&](std::size_t at) {
    return at + 1 < total && compressed[at] == 0x1F && compressed[at + 1] == 0x8B;
  };
  if (!is_member_start(0))
    detail::gzip_error(path, "is not gzip-compressed: at byte offset 0 it starts with " +
                                 (total >= 2 ? detail::hex_byte(compressed[0]) + " " + detail::hex_byte(compressed[1])
                                             : std::string(total == 1 ? "one byte" : "nothing")) +
                                 ", not gzip's magic bytes 1F 8B");

  // The last member's trailer holds its size mod 2^32: a first guess at the
  // output's size, which grows by doubling when the guess is short. The
  // guess is not trusted beyond what deflate can produce from this many
  // bytes (at most 1032 to 1), so that a corrupt or hostile trailer cannot
  // make the reader allocate a gigabyte for an 18-byte file.
  std::size_t expected = std::size_t{1} << 16;
  if (total >= 18) {
    const std::size_t hint = std::size_t{compressed[total - 4]} | std::size_t{compressed[total - 3]} << 8 |
                             std::size_t{compressed[total - 2]} << 16 | std::size_t{compressed[total - 1]} << 24;
    constexpr std::size_t deflate_max_ratio = 1032;
    expected = std::clamp<std::size_t>(std::min(hint, total * deflate_max_ratio), expected, std::size_t{1} << 30);
  }
  std::vector<std::uint8_t> out(expected);

  z_stream stream{};
  if (inflateInit2(&stream, 15 + 16) != Z_OK)  // 15: the largest window; +16: gzip framing
    throw std::bad_alloc();
  struct end_on_exit {
    z_stream& stream;
    ~end_on_exit() { inflateEnd(&stream); }
  } guard{stream};

  constexpr std::size_t chunk = std::size_t{1} << 26;  // stays within zlib's uInt counts
  std::size_t consumed = 0;                            // compressed bytes read, over all members
  std::size_t produced = 0;
  std::size_t member_start = 0;
  for (;;) {
    if (produced == out.size()) out.resize(out.size() * 2);
    const std::size_t in_now = std::min(chunk, total - consumed);
    const std::size_t out_now = std::min(chunk, out.size() - produced);
    stream.next_in = const_cast<Bytef*>(compressed.data() + consumed);
    stream.avail_in = static_cast<uInt>(in_now);
    stream.next_out = out.data() + produced;
    stream.avail_out = static_cast<uInt>(out_now);
    const int status = inflate(&stream, Z_NO_FLUSH);
    consumed += in_now - stream.avail_in;
    produced += out_now - stream.avail_out;

    if (status == Z_STREAM_END) {
      if (consumed == total) break;
      if (!is_member_start(consumed))
        detail::gzip_error(path, "has " + std::to_string(total - consumed) +
                                     " bytes of trailing data at byte offset " + std::to_string(consumed) +
                                     ", after the end of the gzip stream that started at byte offset " +
                                     std::to_string(member_start));
      member_start = consumed;
      inflateReset(&stream);
      continue;
    }
    if (status == Z_DATA_ERROR || status == Z_NEED_DICT || status == Z_STREAM_ERROR)
      detail::gzip_error(path, "is corrupt at byte offset " + std::to_string(consumed) + " (zlib: " +
                                   (stream.msg ? stream.msg : "invalid data") + "), after " +
                                   std::to_string(produced) + " decompressed bytes");
    if (status == Z_MEM_ERROR) throw std::bad_alloc();
    if (consumed == total && stream.avail_out != 0)
      detail::gzip_error(path, "is truncated: its data ends at byte offset " + std::to_string(total) +
                                   " inside the gzip stream that started at byte offset " +
                                   std::to_string(member_start) + ", after " + std::to_string(produced) +
                                   " decompressed bytes");
  }
  out.resize(produced);
  return out;
}

}  // namespace typeflow::data

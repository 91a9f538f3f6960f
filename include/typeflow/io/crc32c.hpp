// crc32c: the Castagnoli CRC-32 (polynomial 0x1EDC6F41, reflected 0x82F63B78)
// that TFRecord and TensorBoard's event files frame their records with, and
// its "masked" form those files store.
//
//   crc32c("123456789") == 0xE3069283          (the standard check value)
//   masked_crc32c(data) == rotr(crc, 15) + 0xA282EAD8
//
// On x86-64 CPUs with SSE4.2 the crc32 instruction computes it (8 bytes an
// instruction), chosen at run time; elsewhere, and on CPUs without it, a
// table of 8 x 256 entries (slicing by 8) does. Both give the same values:
// tests/unit/tensorboard_test.cpp compares them.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define TYPEFLOW_CRC32C_SSE42 1
#endif

namespace typeflow::io {

namespace detail {

// tables[k][b]: the CRC of byte b followed by k zero bytes.
inline constexpr auto crc32c_tables = [] {
  std::array<std::array<std::uint32_t, 256>, 8> tables{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    tables[0][b] = crc;
  }
  for (std::size_t k = 1; k < 8; ++k)
    for (std::uint32_t b = 0; b < 256; ++b)
      tables[k][b] = (tables[k - 1][b] >> 8) ^ tables[0][tables[k - 1][b] & 0xFFu];
  return tables;
}();

// crc is the running value before its final inversion.
inline std::uint32_t crc32c_portable(std::uint32_t crc, const unsigned char* data, std::size_t size) noexcept {
  const auto& t = crc32c_tables;
  while (size >= 8) {
    std::uint32_t low, high;
    std::memcpy(&low, data, 4);
    std::memcpy(&high, data + 4, 4);
    if constexpr (std::endian::native == std::endian::big) {
      low = __builtin_bswap32(low);
      high = __builtin_bswap32(high);
    }
    low ^= crc;
    crc = t[7][low & 0xFF] ^ t[6][(low >> 8) & 0xFF] ^ t[5][(low >> 16) & 0xFF] ^ t[4][low >> 24] ^
          t[3][high & 0xFF] ^ t[2][(high >> 8) & 0xFF] ^ t[1][(high >> 16) & 0xFF] ^ t[0][high >> 24];
    data += 8;
    size -= 8;
  }
  while (size-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ *data++) & 0xFF];
  return crc;
}

#if defined(TYPEFLOW_CRC32C_SSE42)
__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_sse42(std::uint32_t crc, const unsigned char* data,
                                                                   std::size_t size) noexcept {
  std::uint64_t wide = crc;
  while (size >= 8) {
    std::uint64_t word;
    std::memcpy(&word, data, 8);
    wide = _mm_crc32_u64(wide, word);
    data += 8;
    size -= 8;
  }
  crc = static_cast<std::uint32_t>(wide);
  while (size-- > 0) crc = _mm_crc32_u8(crc, *data++);
  return crc;
}

inline bool cpu_has_sse42() noexcept {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace detail

// Which implementation crc32c uses on this machine: "sse4.2" or "table".
inline std::string_view crc32c_implementation() noexcept {
#if defined(TYPEFLOW_CRC32C_SSE42)
  if (detail::cpu_has_sse42()) return "sse4.2";
#endif
  return "table";
}

// The CRC-32C of data, continuing from a previous result when given one
// (crc32c(ab) == crc32c(b, crc32c(a))).
inline std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t previous = 0) noexcept {
  const auto* bytes = reinterpret_cast<const unsigned char*>(data.data());
  std::uint32_t crc = ~previous;
#if defined(TYPEFLOW_CRC32C_SSE42)
  if (detail::cpu_has_sse42()) return ~detail::crc32c_sse42(crc, bytes, data.size());
#endif
  return ~detail::crc32c_portable(crc, bytes, data.size());
}

// A checksum as the checkpoint manifests record it: "%08x" of the data's CRC-32C.
inline std::string crc32c_text(std::span<const std::byte> data) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", crc32c(data));
  return text;
}
inline std::uint32_t crc32c(std::string_view text, std::uint32_t previous = 0) noexcept {
  return crc32c(std::as_bytes(std::span(text.data(), text.size())), previous);
}

// The table implementation alone, whatever the CPU (for tests and for comparison).
inline std::uint32_t crc32c_table(std::span<const std::byte> data, std::uint32_t previous = 0) noexcept {
  return ~detail::crc32c_portable(~previous, reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

// What TFRecord and event files store: the CRC rotated right by 15 bits plus
// a constant, so that a CRC of data that holds CRCs is not degenerate.
inline std::uint32_t mask_crc32c(std::uint32_t crc) noexcept { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }
inline std::uint32_t unmask_crc32c(std::uint32_t masked) noexcept {
  const std::uint32_t rotated = masked - 0xA282EAD8u;
  return (rotated >> 17) | (rotated << 15);
}
inline std::uint32_t masked_crc32c(std::span<const std::byte> data) noexcept { return mask_crc32c(crc32c(data)); }

}  // namespace typeflow::io

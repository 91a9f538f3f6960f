// safetensors: a strict reader and an atomic writer of the format that
// Hugging Face, PyTorch and Keras use to store named tensors.
//
// A file is three parts, back to back:
//
//   bytes [0, 8)          N, the header length, a little-endian u64
//   bytes [8, 8 + N)      the header: UTF-8 JSON, maybe padded with trailing spaces
//   bytes [8 + N, end)    the data buffer: every tensor's bytes, little-endian,
//                         row-major, with no gaps and no overlaps
//
// The header is one JSON object:
//
//   {"__metadata__": {"format": "pt"},                  // optional, string -> string
//    "dense.kernel": {"dtype": "F32",
//                     "shape": [784, 256],
//                     "data_offsets": [0, 802816]},      // [begin, end) in the data buffer
//    ...}
//
// The reader refuses anything the format does not allow, and every refusal is
// a std::runtime_error that names the file, says what is wrong, and says where:
// a file byte offset, or the header entry at fault. It checks what the
// reference implementation checks (the header starts with '{', the buffer is
// covered exactly) and a little more: duplicate JSON keys, unknown fields in
// an entry, and non-string metadata values are errors too, so that a file
// this reader accepts is read the same way by every other reader.
//
// The writer writes to a temporary file beside the target and renames it
// into place (io/durable_files.hpp), so a crash or an error never leaves a
// half-written file where a good one used to be.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include "typeflow/core/excerpt.hpp"
#include "typeflow/io/compiled.hpp"
#include "typeflow/io/durable_files.hpp"

namespace typeflow::io {

// Tensor bytes go to and from disk as they are in memory, never byte-swapped;
// safetensors stores them little-endian, so the host must be little-endian.
static_assert(std::endian::native == std::endian::little,
              "typeflow/io/safetensors.hpp: safetensors stores tensors little-endian and this "
              "reader/writer does not byte-swap, so it needs a little-endian host");

// ---------------------------------------------------------------------------
// Tensor descriptions and dtypes
// ---------------------------------------------------------------------------

// A tensor as the header describes it: its name, its dtype under the
// safetensors name ("F32", "BF16", "I32", ...), and its full shape (batch
// axis included, when there is one). A scalar has an empty shape.
struct tensor_spec {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;

  friend bool operator==(const tensor_spec&, const tensor_spec&) = default;
};

// The bytes one element of dtype takes. Knows every byte-sized dtype of the
// format: BOOL, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0 (1); I16, U16, F16, BF16 (2);
// I32, U32, F32 (4); I64, U64, F64, C64 (8). The sub-byte dtypes (F4,
// F6_E2M3, F6_E3M2) have no whole byte size and, like any unknown name,
// throw std::invalid_argument.
inline std::size_t dtype_size(std::string_view dtype) {
  struct entry {
    std::string_view name;
    std::size_t bytes;
  };
  static constexpr std::array<entry, 17> known{{
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8},     {"C64", 8},
  }};
  for (const entry& e : known)
    if (e.name == dtype) return e.bytes;
  if (dtype == "F4" || dtype == "F6_E2M3" || dtype == "F6_E3M2")
    throw std::invalid_argument("safetensors dtype \"" + std::string(dtype) +
                                "\" packs elements in less than a byte, which typeflow does not support");
  throw std::invalid_argument(
      "unknown safetensors dtype \"" + std::string(dtype) +
      "\"; known dtypes are BOOL, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, "
      "I32, U32, F32, I64, U64, F64, C64");
}

// "(784, 256)", "(10,)", "()": shapes the way Keras prints them, and the way
// typeflow::shape<...>::str() does.
inline std::string shape_string(std::span<const std::int64_t> shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  return out + ")";
}

namespace detail {

// product(shape) * dtype_size, or nullopt when a dimension is negative or
// the product does not fit in 64 bits.
inline std::optional<std::uint64_t> tensor_byte_size(std::span<const std::int64_t> shape,
                                                     std::size_t element_bytes) {
  constexpr std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t bytes = element_bytes;
  for (std::int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    const auto d = static_cast<std::uint64_t>(dim);
    if (d != 0 && bytes > max / d) return std::nullopt;
    bytes *= d;
  }
  return bytes;
}

// A name from the file, quoted in a message: at most its first 120 bytes
// (a 10 MB tensor name made a message of 10 MB).
inline std::string quoted(std::string_view text) { return "\"" + excerpt(text) + "\""; }

inline std::string byte_range(std::uint64_t begin, std::uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

// One tensor to write: its description and its bytes, bytes long, already
// little-endian and row-major. data may be null only when bytes is 0.
struct tensor_to_write {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
  std::size_t bytes = 0;
};

// Writes tensors and metadata to path as a safetensors file.
//
// Requires: names are unique, non-empty, valid UTF-8, and not "__metadata__";
//   dtypes are known to dtype_size; dimensions are non-negative; and each
//   tensor's bytes == product(shape) * dtype_size(dtype). Metadata keys and
//   values are valid UTF-8. A violation throws std::runtime_error naming the
//   file and the tensor, before anything touches the disk.
// Ensures: the data buffer holds the tensors in the given order, back to back;
//   the header lists "__metadata__" first (omitted when metadata is empty),
//   then the tensors in the given order, and is padded with spaces so that the
//   data buffer starts at a multiple of 8 bytes.
// Atomic: the bytes go to "<path>.tmp-<pid>-<n>" in the same directory (n
//   counts this process's writes, so two saves to one path never share a
//   temporary file), are fsync'ed, and the file is renamed onto path. If
//   anything fails, the temp file is removed, whatever was at path before is
//   left as it was, and a std::runtime_error names the file and the failing
//   step (with strerror). Temporary files beside path whose process is gone
//   (killed mid-write) are removed first.
TYPEFLOW_IO_INLINE void write_safetensors(const std::filesystem::path& path,
                                          std::span<const tensor_to_write> tensors,
                                          const std::map<std::string, std::string>& metadata = {})
#if TYPEFLOW_IO_DEFINITIONS
{
  const auto fail = [&](const std::string& what) -> std::runtime_error {
    return std::runtime_error("cannot write safetensors file \"" + path.string() + "\": " + what);
  };

  // Validate everything and build the header before creating any file.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::map<std::string_view, std::size_t> seen;  // name -> position in tensors
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const tensor_to_write& t = tensors[i];
    const std::string which = "tensor " + std::to_string(i) + " (" + detail::quoted(t.name) + ")";
    if (t.name.empty()) throw fail("tensor " + std::to_string(i) + " has an empty name");
    if (t.name == "__metadata__")
      throw fail(which + ": the name \"__metadata__\" is reserved for the file's metadata");
    if (auto [it, inserted] = seen.emplace(t.name, i); !inserted)
      throw fail(which + ": the name is already used by tensor " + std::to_string(it->second) +
                 "; tensor names must be unique");
    std::size_t element_bytes = 0;
    try {
      element_bytes = dtype_size(t.dtype);
    } catch (const std::invalid_argument& e) {
      throw fail(which + ": " + e.what());
    }
    const std::optional<std::uint64_t> expected = detail::tensor_byte_size(t.shape, element_bytes);
    if (!expected)
      throw fail(which + ": shape " + shape_string(t.shape) +
                 " has a negative dimension or more elements than 64 bits can count");
    if (*expected != t.bytes)
      throw fail(which + ": shape " + shape_string(t.shape) + " of dtype " + t.dtype + " needs " +
                 std::to_string(*expected) + " bytes but " + std::to_string(t.bytes) +
                 " were given");
    if (t.bytes > 0 && t.data == nullptr)
      throw fail(which + ": data is null but " + std::to_string(t.bytes) + " bytes are expected");
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }

  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    // dump() refuses strings that are not valid UTF-8.
    throw fail("a tensor name or metadata entry is not valid UTF-8 (" + std::string(e.what()) + ")");
  }
  // Pad so that 8 + N, where the data buffer starts, is a multiple of 8.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::array<unsigned char, 8> length_prefix{};
  for (std::size_t i = 0; i < 8; ++i)
    length_prefix[i] = static_cast<unsigned char>(std::uint64_t{header_text.size()} >> (8 * i));

  detail::write_atomically(path, fail, [&](const auto& write) {
    write(length_prefix.data(), length_prefix.size(), "the header length");
    write(header_text.data(), header_text.size(), "the header");
    for (const tensor_to_write& t : tensors)
      if (t.bytes > 0) write(t.data, t.bytes, "tensor " + detail::quoted(t.name));
  });
}
#else
;
#endif

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

// A safetensors file read whole into memory and checked.
//
// data(name) returns the tensor's bytes as stored: little-endian, row-major.
// The data buffer starts at an offset the writer chose; this class only
// guarantees byte alignment for a tensor, so copy the bytes out (std::memcpy)
// rather than reinterpret_cast them to float*.
class safetensors_file {
 public:
  // Reads and validates path. Throws std::runtime_error naming the file when
  // it cannot be opened or read (with strerror), or when it is malformed in
  // any way listed at the top of this header.
  static safetensors_file read(const std::filesystem::path& path);

  // Every tensor, ordered by where its bytes lie in the data buffer.
  const std::vector<tensor_spec>& tensors() const noexcept { return tensors_; }

  // The tensor named name, or nullptr when the file has none.
  const tensor_spec* find(std::string_view name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }

  // The bytes of the tensor named name; throws std::out_of_range naming the
  // file and the tensor when the file has none.
  std::span<const std::byte> data(std::string_view name) const {
    const auto it = index_.find(name);
    if (it == index_.end())
      throw std::out_of_range("safetensors file \"" + path_.string() + "\" has no tensor named " +
                              detail::quoted(name));
    const auto [begin, end] = offsets_[it->second];
    return std::span<const std::byte>(bytes_).subspan(static_cast<std::size_t>(data_start_ + begin),
                                                      static_cast<std::size_t>(end - begin));
  }

  // The header's "__metadata__" (empty when the header has none).
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }

  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  safetensors_file() = default;

  std::runtime_error malformed(const std::string& what) const {
    return std::runtime_error("malformed safetensors file \"" + path_.string() + "\": " + what);
  }


  // Parses the JSON header, rejecting duplicate keys at any depth: nlohmann
  // would keep the last one silently, other readers may keep the first.
  nlohmann::json parse_header_json(std::uint64_t header_length) const;

  void parse_metadata(const nlohmann::json& meta, const std::string& where);

  // Reads a JSON array of non-negative integers, or says what is wrong with it.
  static std::optional<std::string> read_unsigned_array(const nlohmann::json& value, std::vector<std::uint64_t>& out);

  void parse();

  std::filesystem::path path_;
  std::vector<std::byte> bytes_;                                    // the whole file
  std::uint64_t data_start_ = 0;                                    // 8 + N
  std::vector<tensor_spec> tensors_;                                // in data-offset order
  std::vector<std::pair<std::uint64_t, std::uint64_t>> offsets_;    // [begin, end) in the data buffer, per tensor
  std::map<std::string, std::size_t, std::less<>> index_;           // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// The reading functions, compiled once with TYPEFLOW_COMPILED_IO (io/compiled.hpp).
#if TYPEFLOW_IO_DEFINITIONS
TYPEFLOW_IO_INLINE safetensors_file safetensors_file::read(const std::filesystem::path& path) {
  safetensors_file file;
  file.path_ = path;
  file.bytes_ = detail::read_whole_file(path, "safetensors file");
  file.parse();
  return file;
}

TYPEFLOW_IO_INLINE nlohmann::json safetensors_file::parse_header_json(std::uint64_t header_length) const {
  const char* begin = reinterpret_cast<const char*>(bytes_.data()) + 8;
  const char* end = begin + header_length;
  const std::string where = "header (file bytes " + detail::byte_range(8, 8 + header_length) + ")";

  std::vector<std::vector<std::string>> keys_per_open_object;
  std::optional<std::string> duplicate_key;
  const auto reject_duplicates = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using event_t = nlohmann::json::parse_event_t;
    if (event == event_t::object_start) keys_per_open_object.emplace_back();
    if (event == event_t::object_end && !keys_per_open_object.empty()) keys_per_open_object.pop_back();
    if (event == event_t::key && !keys_per_open_object.empty() && !duplicate_key) {
      std::vector<std::string>& keys = keys_per_open_object.back();
      const std::string& key = parsed.get_ref<const std::string&>();
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) duplicate_key = key;
      keys.push_back(key);
    }
    return true;
  };

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(begin, end, reject_duplicates);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts the characters read, so the offending one is e.byte - 1.
    const std::uint64_t at = 8 + std::min<std::uint64_t>(e.byte > 0 ? e.byte - 1 : 0, header_length);
    throw malformed("the " + where + " is not valid JSON; the parser stopped near file byte offset " +
                    std::to_string(at) + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    // out_of_range: a number beyond a double (1e999), which has no offset
    throw malformed("the " + where + " is not valid JSON: " + e.what());
  }
  if (duplicate_key)
    throw malformed("the " + where + " has the key " + detail::quoted(*duplicate_key) +
                    " twice in one object; JSON readers disagree on which to keep");
  if (!header.is_object())
    throw malformed("the " + where + " is a JSON " + header.type_name() + ", not an object");
  return header;
}

TYPEFLOW_IO_INLINE void safetensors_file::parse_metadata(const nlohmann::json& meta, const std::string& where) {
  if (!meta.is_object())
    throw malformed("\"__metadata__\" in the " + where + " is a JSON " + meta.type_name() +
                    ", not an object of strings");
  for (const auto& [key, value] : meta.items()) {
    if (!value.is_string())
      throw malformed("\"__metadata__\" in the " + where + ": the value of " + detail::quoted(key) +
                      " is a JSON " + value.type_name() + "; metadata values must be strings");
    metadata_.emplace(key, value.get<std::string>());
  }
}

TYPEFLOW_IO_INLINE std::optional<std::string> safetensors_file::read_unsigned_array(const nlohmann::json& value, std::vector<std::uint64_t>& out) {
  if (!value.is_array()) return std::string("is a JSON ") + value.type_name() + ", not an array";
  for (std::size_t i = 0; i < value.size(); ++i) {
    const nlohmann::json& item = value[i];
    // An array or object is named, not printed: printing recurses once per
    // level, and a hostile header nests deeper than the stack holds.
    if (!item.is_number_unsigned())
      return "has " + (item.is_structured() ? std::string("a JSON ") + item.type_name() : item.dump()) +
             " at index " + std::to_string(i) + ", not a non-negative integer";
    out.push_back(item.get<std::uint64_t>());
  }
  return std::nullopt;
}

TYPEFLOW_IO_INLINE void safetensors_file::parse() {
  const std::uint64_t file_size = bytes_.size();
  if (file_size < 8)
    throw malformed("the file is " + std::to_string(file_size) +
                    " bytes long, shorter than the 8-byte header length at file bytes [0, 8)");
  std::uint64_t header_length = 0;
  for (std::size_t i = 0; i < 8; ++i) header_length |= std::uint64_t{std::to_integer<std::uint8_t>(bytes_[i])} << (8 * i);
  if (header_length > file_size - 8)
    throw malformed("the header length at file bytes [0, 8) is " + std::to_string(header_length) +
                    " but only " + std::to_string(file_size - 8) + " bytes follow it");
  if (header_length == 0 || bytes_[8] != std::byte{'{'})
    throw malformed("the header at file byte offset 8 does not begin with '{'");
  data_start_ = 8 + header_length;
  const std::uint64_t buffer_size = file_size - data_start_;
  const std::string where = "header (file bytes " + detail::byte_range(8, data_start_) + ")";
  const std::string buffer_where =
      "the data buffer (file bytes " + detail::byte_range(data_start_, file_size) + ", " +
      std::to_string(buffer_size) + " bytes)";

  const nlohmann::json header = parse_header_json(header_length);
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      parse_metadata(entry, where);
      continue;
    }
    const std::string which = "tensor " + detail::quoted(name) + " in the " + where;
    if (!entry.is_object())
      throw malformed(which + " is a JSON " + entry.type_name() +
                      ", not an object with dtype, shape and data_offsets");
    for (const auto& [field, value] : entry.items())
      if (field != "dtype" && field != "shape" && field != "data_offsets")
        throw malformed(which + " has the unknown field " + detail::quoted(field) +
                        "; an entry holds only dtype, shape and data_offsets");
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(field)) throw malformed(which + " has no \"" + std::string(field) + "\"");

    const nlohmann::json& dtype = entry["dtype"];
    if (!dtype.is_string())
      throw malformed(which + ": \"dtype\" is a JSON " + dtype.type_name() + ", not a string");
    std::size_t element_bytes = 0;
    try {
      element_bytes = dtype_size(dtype.get_ref<const std::string&>());
    } catch (const std::invalid_argument& e) {
      throw malformed(which + ": " + e.what());
    }

    std::vector<std::uint64_t> dims;
    if (auto problem = read_unsigned_array(entry["shape"], dims))
      throw malformed(which + ": \"shape\" " + *problem);
    std::vector<std::int64_t> shape;
    for (std::uint64_t dim : dims) {
      if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        throw malformed(which + ": \"shape\" has the dimension " + std::to_string(dim) +
                        ", larger than a signed 64-bit integer holds");
      shape.push_back(static_cast<std::int64_t>(dim));
    }

    std::vector<std::uint64_t> offsets;
    if (auto problem = read_unsigned_array(entry["data_offsets"], offsets))
      throw malformed(which + ": \"data_offsets\" " + *problem);
    if (offsets.size() != 2)
      throw malformed(which + ": \"data_offsets\" has " + std::to_string(offsets.size()) +
                      " numbers, not the 2 of [begin, end]");
    const std::uint64_t begin = offsets[0], end = offsets[1];
    const std::string offsets_text =
        "\"data_offsets\" [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
    if (begin > end) throw malformed(which + ": " + offsets_text + " ends before it begins");

    const std::optional<std::uint64_t> expected = detail::tensor_byte_size(shape, element_bytes);
    if (!expected)
      throw malformed(which + ": shape " + shape_string(shape) + " has more elements than 64 bits can count");
    if (end - begin != *expected)
      throw malformed(which + ": " + offsets_text + " span " + std::to_string(end - begin) +
                      " bytes but shape " + shape_string(shape) + " of dtype " + dtype.get<std::string>() +
                      " needs " + std::to_string(*expected) + " bytes");
    if (end > buffer_size)
      throw malformed(which + ": " + offsets_text + " (file bytes " +
                      detail::byte_range(data_start_ + begin, data_start_ + end) +
                      ") reach past the end of " + buffer_where);

    tensors_.push_back({name, dtype.get<std::string>(), std::move(shape)});
    offsets_.emplace_back(begin, end);
  }

  // Order by offsets; ties (zero-sized tensors) keep the header's key order.
  std::vector<std::size_t> order(tensors_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return offsets_[a] < offsets_[b]; });
  std::vector<tensor_spec> sorted_tensors;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> sorted_offsets;
  for (std::size_t i : order) {
    sorted_tensors.push_back(std::move(tensors_[i]));
    sorted_offsets.push_back(offsets_[i]);
  }
  tensors_ = std::move(sorted_tensors);
  offsets_ = std::move(sorted_offsets);

  // The tensors must tile the data buffer exactly: no overlaps, no holes.
  std::uint64_t covered_to = 0;
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    const auto [begin, end] = offsets_[i];
    const std::string file_bytes = "file bytes " + detail::byte_range(data_start_ + begin, data_start_ + end);
    if (begin < covered_to)
      throw malformed("tensor " + detail::quoted(tensors_[i].name) + " (" + file_bytes +
                      ") overlaps tensor " + detail::quoted(tensors_[i - 1].name) + " (file bytes " +
                      detail::byte_range(data_start_ + offsets_[i - 1].first, data_start_ + offsets_[i - 1].second) +
                      ") in " + buffer_where);
    if (begin > covered_to)
      throw malformed("file bytes " + detail::byte_range(data_start_ + covered_to, data_start_ + begin) +
                      " of " + buffer_where + " belong to no tensor; the gap lies " +
                      (i == 0 ? "before the first tensor, " + detail::quoted(tensors_[i].name)
                              : "between tensors " + detail::quoted(tensors_[i - 1].name) + " and " +
                                    detail::quoted(tensors_[i].name)));
    covered_to = end;
  }
  if (covered_to != buffer_size)
    throw malformed("file bytes " + detail::byte_range(data_start_ + covered_to, file_size) + " at the end of " +
                    buffer_where + " belong to no tensor");

  for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}
#endif

// ---------------------------------------------------------------------------
// Checking a file against a model
// ---------------------------------------------------------------------------

// Checks that file holds exactly the tensors expected: each expected name
// present with the same dtype and shape, and nothing else. Otherwise throws
// std::runtime_error naming the file, with the first 5 mismatches one per
// line (expected tensors in the given order, then extra tensors in file
// order), and "... and K more" when there are more:
//
//   safetensors file "model.safetensors" does not match the model (3 mismatches):
//     layers.1.kernel: shape (784, 512) in file, (784, 256) expected
//     layers.3.bias: missing from file
//     extra.weight: not in the model
//
// expected must not name a tensor twice (std::invalid_argument otherwise).
TYPEFLOW_IO_INLINE void check_tensors_match(const safetensors_file& file, std::span<const tensor_spec> expected)
#if TYPEFLOW_IO_DEFINITIONS
{
  constexpr std::size_t shown = 5;
  std::vector<std::string> mismatches;
  std::map<std::string_view, bool, std::less<>> expected_names;
  for (const tensor_spec& want : expected) {
    if (!expected_names.emplace(want.name, true).second)
      throw std::invalid_argument("check_tensors_match: the expected tensors name " +
                                  detail::quoted(want.name) + " twice");
    const tensor_spec* have = file.find(want.name);
    if (have == nullptr) {
      mismatches.push_back(want.name + ": missing from file");
      continue;
    }
    std::string problems;
    if (have->dtype != want.dtype) problems += "dtype " + have->dtype + " in file, " + want.dtype + " expected";
    if (have->shape != want.shape) {
      if (!problems.empty()) problems += "; ";
      problems += "shape " + shape_string(have->shape) + " in file, " + shape_string(want.shape) + " expected";
    }
    if (!problems.empty()) mismatches.push_back(want.name + ": " + problems);
  }
  for (const tensor_spec& have : file.tensors())
    if (!expected_names.contains(have.name)) mismatches.push_back(excerpt(have.name) + ": not in the model");
  if (mismatches.empty()) return;

  std::string message = "safetensors file \"" + file.path().string() + "\" does not match the model (" +
                        std::to_string(mismatches.size()) +
                        (mismatches.size() == 1 ? " mismatch):" : " mismatches):");
  for (std::size_t i = 0; i < std::min(shown, mismatches.size()); ++i) message += "\n  " + mismatches[i];
  if (mismatches.size() > shown) message += "\n  ... and " + std::to_string(mismatches.size() - shown) + " more";
  throw std::runtime_error(message);
}
#else
;
#endif

}  // namespace typeflow::io

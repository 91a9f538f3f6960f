// A reader of TensorBoard event files for the tests, written apart from
// typeflow's writer (io/event_file.hpp): it checks each record's framing
// and both masked CRC-32Cs, then decodes protobuf's wire format field by
// field, by the field numbers of tensorflow's event.proto and summary.proto:
//
//   Event          1 wall_time double, 2 step int64, 3 file_version string, 5 summary Summary
//   Summary        1 value repeated Value
//   Summary.Value  1 tag string, 2 simple_value float, 5 histo HistogramProto
//   HistogramProto 1 min, 2 max, 3 num, 4 sum, 5 sum_squares double; 6 bucket_limit, 7 bucket packed double
//
// Fields it does not know are skipped by their wire type, as protobuf does.
// Throws std::runtime_error saying what is wrong and at which byte.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <typeflow/io/crc32c.hpp>

namespace typeflow::testing {

struct event_histogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;
};

struct event_value {
  std::string tag;
  std::optional<float> simple_value;
  std::optional<event_histogram> histo;
};

struct event_record {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string file_version;
  std::vector<event_value> values;
};

namespace detail {

class wire_reader {
 public:
  wire_reader(const std::string& bytes, std::size_t begin, std::size_t end) : bytes_(bytes), at_(begin), end_(end) {}
  bool done() const { return at_ >= end_; }
  std::uint64_t varint() {
    std::uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const auto byte = static_cast<unsigned char>(bytes_[at_++]);
      value |= std::uint64_t{byte & 0x7Fu} << shift;
      if (!(byte & 0x80)) return value;
    }
    fail("a varint longer than ten bytes");
  }
  std::uint64_t fixed(int size) {
    need(static_cast<std::size_t>(size));
    std::uint64_t value = 0;
    for (int i = 0; i < size; ++i) value |= std::uint64_t{static_cast<unsigned char>(bytes_[at_++])} << (8 * i);
    return value;
  }
  double float64() {
    const std::uint64_t bits = fixed(8);
    double v;
    std::memcpy(&v, &bits, 8);
    return v;
  }
  float float32() {
    const auto bits = static_cast<std::uint32_t>(fixed(4));
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
  // A length-delimited field: its [begin, end) in the buffer.
  std::pair<std::size_t, std::size_t> delimited() {
    const std::uint64_t length = varint();
    need(length);
    const std::size_t begin = at_;
    at_ += length;
    return {begin, at_};
  }
  void skip(std::uint32_t wire) {
    switch (wire) {
      case 0: varint(); break;
      case 1: fixed(8); break;
      case 2: delimited(); break;
      case 5: fixed(4); break;
      default: fail("wire type " + std::to_string(wire));
    }
  }
  std::size_t position() const { return at_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("event file: " + what + " at byte " + std::to_string(at_));
  }

 private:
  void need(std::uint64_t count) const {
    if (count > end_ - at_) fail("a field that runs past its message");
  }
  const std::string& bytes_;
  std::size_t at_, end_;
};

inline std::vector<double> packed_doubles(const std::string& bytes, std::pair<std::size_t, std::size_t> range) {
  if ((range.second - range.first) % 8 != 0) throw std::runtime_error("event file: packed doubles not a multiple of 8");
  std::vector<double> out;
  wire_reader r(bytes, range.first, range.second);
  while (!r.done()) out.push_back(r.float64());
  return out;
}

inline event_histogram read_histogram(const std::string& bytes, std::pair<std::size_t, std::size_t> range) {
  event_histogram h;
  wire_reader r(bytes, range.first, range.second);
  while (!r.done()) {
    const std::uint64_t key = r.varint();
    const auto field = key >> 3;
    const auto wire = static_cast<std::uint32_t>(key & 7);
    if (field >= 1 && field <= 5 && wire == 1) {
      const double v = r.float64();
      double* fields[] = {&h.min, &h.max, &h.num, &h.sum, &h.sum_squares};
      *fields[field - 1] = v;
    } else if ((field == 6 || field == 7) && wire == 2) {
      auto values = packed_doubles(bytes, r.delimited());
      auto& into = field == 6 ? h.bucket_limit : h.bucket;
      into.insert(into.end(), values.begin(), values.end());
    } else {
      r.skip(wire);
    }
  }
  return h;
}

inline event_value read_value(const std::string& bytes, std::pair<std::size_t, std::size_t> range) {
  event_value v;
  wire_reader r(bytes, range.first, range.second);
  while (!r.done()) {
    const std::uint64_t key = r.varint();
    const auto field = key >> 3;
    const auto wire = static_cast<std::uint32_t>(key & 7);
    if (field == 1 && wire == 2) {
      const auto [b, e] = r.delimited();
      v.tag = bytes.substr(b, e - b);
    } else if (field == 2 && wire == 5) {
      v.simple_value = r.float32();
    } else if (field == 5 && wire == 2) {
      v.histo = read_histogram(bytes, r.delimited());
    } else {
      r.skip(wire);
    }
  }
  return v;
}

inline event_record read_event(const std::string& bytes, std::size_t begin, std::size_t end) {
  event_record e;
  wire_reader r(bytes, begin, end);
  while (!r.done()) {
    const std::uint64_t key = r.varint();
    const auto field = key >> 3;
    const auto wire = static_cast<std::uint32_t>(key & 7);
    if (field == 1 && wire == 1) {
      e.wall_time = r.float64();
    } else if (field == 2 && wire == 0) {
      e.step = static_cast<std::int64_t>(r.varint());
    } else if (field == 3 && wire == 2) {
      const auto [b, s] = r.delimited();
      e.file_version = bytes.substr(b, s - b);
    } else if (field == 5 && wire == 2) {
      const auto [b, s] = r.delimited();
      wire_reader summary(bytes, b, s);
      while (!summary.done()) {
        const std::uint64_t k = summary.varint();
        if ((k >> 3) == 1 && (k & 7) == 2)
          e.values.push_back(read_value(bytes, summary.delimited()));
        else
          summary.skip(static_cast<std::uint32_t>(k & 7));
      }
    } else {
      r.skip(wire);
    }
  }
  return e;
}

inline std::uint32_t little32(const std::string& bytes, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t{static_cast<unsigned char>(bytes[at + i])} << (8 * i);
  return v;
}

}  // namespace detail

// Every event of the file, in order; the framing and CRCs checked.
inline std::vector<event_record> read_event_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("event file: cannot open " + path.string());
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<event_record> events;
  std::size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) throw std::runtime_error("event file: a record header cut short at byte " + std::to_string(at));
    std::uint64_t length = 0;
    for (int i = 0; i < 8; ++i) length |= std::uint64_t{static_cast<unsigned char>(bytes[at + i])} << (8 * i);
    const auto header = std::as_bytes(std::span(bytes.data() + at, 8));
    // The CRC by the table, so that the writer's SSE4.2 path is checked against another implementation.
    if (detail::little32(bytes, at + 8) != io::mask_crc32c(io::crc32c_table(header)))
      throw std::runtime_error("event file: the length's CRC is wrong at byte " + std::to_string(at));
    if (length > bytes.size() - at - 12 || bytes.size() - at - 12 - length < 4)
      throw std::runtime_error("event file: a record runs past the end at byte " + std::to_string(at));
    const std::size_t data = at + 12;
    const auto body = std::as_bytes(std::span(bytes.data() + data, length));
    if (detail::little32(bytes, data + length) != io::mask_crc32c(io::crc32c_table(body)))
      throw std::runtime_error("event file: the data's CRC is wrong at byte " + std::to_string(data));
    events.push_back(detail::read_event(bytes, data, data + length));
    at = data + length + 4;
  }
  return events;
}

// The event file in dir (exactly one is expected).
inline std::filesystem::path only_event_file(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().starts_with("events.out.tfevents.")) found.push_back(entry.path());
  if (found.size() != 1)
    throw std::runtime_error("expected one event file in " + dir.string() + ", found " + std::to_string(found.size()));
  return found[0];
}

}  // namespace typeflow::testing

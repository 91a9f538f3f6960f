// event_file_writer: TensorBoard's event files (events.out.tfevents.*), the
// TFRecord framing around tensorflow.Event protobuf messages.
//
// Each record on disk:
//
//   uint64  length                 little-endian, of data
//   uint32  masked_crc32c(length)  the 8 bytes above (crc32c.hpp)
//   byte    data[length]           one serialized Event
//   uint32  masked_crc32c(data)
//
// The messages, as tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto define them; only the fields
// written here are listed, with their numbers:
//
//   Event          1 wall_time double, 2 step int64, 3 file_version string, 5 summary Summary
//   Summary        1 value repeated Value
//   Summary.Value  1 tag string, 2 simple_value float, 5 histo HistogramProto
//   HistogramProto 1 min, 2 max, 3 num, 4 sum, 5 sum_squares double;
//                  6 bucket_limit, 7 bucket repeated double (packed)
//
// The first record is the Event with file_version "brain.Event:2" that
// TensorBoard expects; then one Event per scalar or histogram. The encoding
// is protobuf's wire format written by hand (a few fields, no dependency);
// tests/unit/tensorboard_test.cpp reads it back, and with Debian's
// python3-protobuf present, the real protobuf library parses it too.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#if !defined(_WIN32)
#include <unistd.h>
#endif

#include "typeflow/io/crc32c.hpp"

namespace typeflow::io {

// Protobuf's wire format, appended to a byte string.
class protobuf_writer {
 public:
  enum wire_type : std::uint32_t { varint_wire = 0, fixed64_wire = 1, length_wire = 2, fixed32_wire = 5 };

  void varint(std::uint64_t value) {
    while (value >= 0x80) {
      bytes_.push_back(static_cast<char>((value & 0x7F) | 0x80));
      value >>= 7;
    }
    bytes_.push_back(static_cast<char>(value));
  }
  void tag(std::uint32_t field, wire_type wire) { varint((std::uint64_t{field} << 3) | wire); }
  void double_field(std::uint32_t field, double value) {
    tag(field, fixed64_wire);
    fixed(std::bit_cast<std::uint64_t>(value), 8);
  }
  void float_field(std::uint32_t field, float value) {
    tag(field, fixed32_wire);
    fixed(std::bit_cast<std::uint32_t>(value), 4);
  }
  void int64_field(std::uint32_t field, std::int64_t value) {
    tag(field, varint_wire);
    varint(static_cast<std::uint64_t>(value));  // negative values take ten bytes, as protobuf's int64
  }
  void bytes_field(std::uint32_t field, std::string_view value) {
    tag(field, length_wire);
    varint(value.size());
    bytes_.append(value);
  }
  void packed_doubles(std::uint32_t field, std::span<const double> values) {
    tag(field, length_wire);
    varint(values.size() * 8);
    for (double v : values) fixed(std::bit_cast<std::uint64_t>(v), 8);
  }
  const std::string& bytes() const noexcept { return bytes_; }

 private:
  void fixed(std::uint64_t value, int size) {
    for (int i = 0; i < size; ++i) bytes_.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
  }
  std::string bytes_;
};

// HistogramProto's fields: counts of values in buckets, each bucket holding
// the values up to its limit (and above the previous one's).
struct histogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;

  // buckets equal-width buckets from the smallest to the largest finite
  // value (as tf.summary.histogram); one bucket when all values are equal.
  // Non-finite values are left out of every field.
  static histogram of(std::span<const float> values, int buckets = 30) {
    if (buckets < 1) throw std::invalid_argument("histogram: buckets must be at least 1 (got " + std::to_string(buckets) + ")");
    histogram h;
    h.min = std::numeric_limits<double>::infinity();
    h.max = -h.min;
    for (float v : values) {
      if (!std::isfinite(v)) continue;
      h.min = std::min(h.min, double{v});
      h.max = std::max(h.max, double{v});
      h.num += 1;
      h.sum += v;
      h.sum_squares += double{v} * v;
    }
    if (h.num == 0) {
      h.min = h.max = 0;
      return h;
    }
    const int count = h.max > h.min ? buckets : 1;
    const double width = (h.max - h.min) / count;
    h.bucket.assign(static_cast<std::size_t>(count), 0.0);
    for (int i = 0; i < count; ++i) h.bucket_limit.push_back(i + 1 == count ? h.max : h.min + width * (i + 1));
    for (float v : values) {
      if (!std::isfinite(v)) continue;
      const int at = width > 0 ? std::min(count - 1, static_cast<int>((v - h.min) / width)) : 0;
      h.bucket[static_cast<std::size_t>(at)] += 1;
    }
    return h;
  }
};

class event_file_writer {
 public:
  // Creates directory (and its parents) and a new event file in it, named as
  // TensorFlow names them: events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2.
  explicit event_file_writer(const std::filesystem::path& directory) {
    std::error_code error;
    std::filesystem::create_directories(directory, error);
    if (error)
      throw std::runtime_error("tensorboard: cannot create the log directory \"" + directory.string() +
                               "\": " + error.message());
    static std::atomic<int> files_opened{0};
    path_ = directory / ("events.out.tfevents." + std::to_string(static_cast<long long>(wall_time())) + "." +
                         host_name() + "." + std::to_string(process_id()) + "." + std::to_string(files_opened++) +
                         ".v2");
    file_ = std::fopen(path_.c_str(), "wb");
    if (!file_) throw std::runtime_error("tensorboard: cannot open \"" + path_.string() + "\" for writing");
    protobuf_writer event;
    event.double_field(1, wall_time());
    event.bytes_field(3, "brain.Event:2");
    write_record(event.bytes());
  }
  event_file_writer(const event_file_writer&) = delete;
  event_file_writer& operator=(const event_file_writer&) = delete;
  ~event_file_writer() {
    if (file_) std::fclose(file_);
  }

  const std::filesystem::path& path() const noexcept { return path_; }

  // An Event at step holding one Summary.Value (tag, simple_value).
  void add_scalar(std::string_view tag, double value, std::int64_t step) {
    protobuf_writer summary_value;
    summary_value.bytes_field(1, tag);
    summary_value.float_field(2, static_cast<float>(value));
    write_summary(summary_value.bytes(), step);
  }

  // An Event at step holding one Summary.Value (tag, histo).
  void add_histogram(std::string_view tag, const histogram& h, std::int64_t step) {
    protobuf_writer histo;
    histo.double_field(1, h.min);
    histo.double_field(2, h.max);
    histo.double_field(3, h.num);
    histo.double_field(4, h.sum);
    histo.double_field(5, h.sum_squares);
    histo.packed_doubles(6, h.bucket_limit);
    histo.packed_doubles(7, h.bucket);
    protobuf_writer summary_value;
    summary_value.bytes_field(1, tag);
    summary_value.bytes_field(5, histo.bytes());
    write_summary(summary_value.bytes(), step);
  }

  // Sends what was written to the operating system, so TensorBoard sees it.
  void flush() {
    if (std::fflush(file_) != 0) throw std::runtime_error("tensorboard: writing \"" + path_.string() + "\" failed");
  }

  // Seconds since the epoch, as Event.wall_time holds them.
  static double wall_time() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }

 private:
  void write_summary(const std::string& value, std::int64_t step) {
    protobuf_writer summary;
    summary.bytes_field(1, value);
    protobuf_writer event;
    event.double_field(1, wall_time());
    event.int64_field(2, step);
    event.bytes_field(5, summary.bytes());
    write_record(event.bytes());
  }

  void write_record(const std::string& data) {
    unsigned char header[12];
    const std::uint64_t length = data.size();
    for (int i = 0; i < 8; ++i) header[i] = static_cast<unsigned char>((length >> (8 * i)) & 0xFF);
    put32(header + 8, masked_crc32c(std::as_bytes(std::span(header, 8))));
    unsigned char footer[4];
    put32(footer, masked_crc32c(std::as_bytes(std::span(data.data(), data.size()))));
    if (std::fwrite(header, 1, sizeof header, file_) != sizeof header ||
        std::fwrite(data.data(), 1, data.size(), file_) != data.size() ||
        std::fwrite(footer, 1, sizeof footer, file_) != sizeof footer)
      throw std::runtime_error("tensorboard: writing \"" + path_.string() + "\" failed");
  }
  static void put32(unsigned char* out, std::uint32_t value) {
    for (int i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>((value >> (8 * i)) & 0xFF);
  }

  static std::string host_name() {
    char name[256] = {};
#if !defined(_WIN32)
    if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
    return name;
#else
    return "localhost";
#endif
  }
  static long process_id() {
#if !defined(_WIN32)
    return static_cast<long>(::getpid());
#else
    return 0;
#endif
  }

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace typeflow::io

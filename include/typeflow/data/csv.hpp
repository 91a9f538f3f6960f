// csv<Columns, Label>(path, label_column, has_header): a file of numeric
// comma-separated columns, one sample per line; one column is the label.
//
//   csv<5>(path, /*label_column=*/4)           example<tensor_value<float, shape<4>>,        the other columns, in order
//                                                      tensor_value<std::int32_t, shape<>>>  a class id
//   csv<5, float>(path, 0, /*has_header=*/true)  a float target, for regression
//   cardinality = the number of data lines
//
// Columns counts every column of the file, the label's included. label_column
// counts from 0; a negative one counts from the end (-1 is the last). Fields
// may have spaces around them; "\r\n" line ends and blank lines are accepted.
// Features parse as float ("nan" and "inf" included); an int32 label must be
// an integer ("3" or "3.0"). The file is read and parsed whole, once, at
// construction, into storage shared by every copy and cursor.
//
// Errors are std::runtime_error naming the file, the line (from 1) and the
// byte offset, and for a bad field its column (from 1): a number that does
// not parse, a label that is not an integer, a line (the header included)
// with a wrong number of columns. Columns < 2 is a compile error; a
// label_column outside the file's columns throws std::invalid_argument.
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "typeflow/core/excerpt.hpp"
#include "typeflow/core/shape.hpp"
#include "typeflow/data/from_tensor_slices.hpp"
#include "typeflow/data/read_file.hpp"

namespace typeflow::data {

template <int Columns, class Label = std::int32_t>
class csv_dataset {
  static_assert(Columns >= 2, "csv<Columns>: Columns counts the label too, so a file needs at least two columns");
  static_assert(std::is_same_v<Label, std::int32_t> || std::is_same_v<Label, float>,
                "csv<Columns, Label>: Label must be std::int32_t (class ids) or float (regression targets)");

 public:
  using feature_shape = shape<Columns - 1>;
  using samples = tensor_slices_dataset<float, feature_shape, Label, shape<>>;
  using element_type = typename samples::element_type;
  using cursor = typename samples::cursor;

  csv_dataset(const std::filesystem::path& path, int label_column, bool has_header)
      : samples_(parse(path, checked_column(label_column), has_header)) {}

  std::int64_t cardinality() const noexcept { return samples_.cardinality(); }
  bool random_access() const noexcept { return true; }
  cursor open(std::uint64_t epoch = 0) const { return samples_.open(epoch); }

 private:
  static int checked_column(int label_column) {
    const int column = label_column < 0 ? Columns + label_column : label_column;
    if (column < 0 || column >= Columns)
      throw std::invalid_argument("csv<" + std::to_string(Columns) + ">: label_column " +
                                  std::to_string(label_column) + " is not one of the file's " +
                                  std::to_string(Columns) + " columns (0.." + std::to_string(Columns - 1) +
                                  ", or -1..-" + std::to_string(Columns) + " from the end)");
    return column;
  }

  static std::string_view trimmed(std::string_view field) {
    while (!field.empty() && (field.front() == ' ' || field.front() == '\t')) field.remove_prefix(1);
    while (!field.empty() && (field.back() == ' ' || field.back() == '\t')) field.remove_suffix(1);
    return field;
  }

  static bool parse_float(std::string_view field, float& value) {
    if (!field.empty() && field.front() == '+') field.remove_prefix(1);
    if (field.empty()) return false;
    const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
    return error == std::errc{} && end == field.data() + field.size();
  }

  static bool parse_class_id(std::string_view field, std::int32_t& value) {
    if (!field.empty() && field.front() == '+') field.remove_prefix(1);
    if (field.empty()) return false;
    const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (error == std::errc{} && end == field.data() + field.size()) return value >= 0;  // a class id is never negative
    double as_double = 0;  // "3.0" is the integer 3
    const auto [d_end, d_error] = std::from_chars(field.data(), field.data() + field.size(), as_double);
    if (d_error != std::errc{} || d_end != field.data() + field.size()) return false;
    if (!(std::floor(as_double) == as_double) || as_double < std::numeric_limits<std::int32_t>::min() ||
        as_double > std::numeric_limits<std::int32_t>::max())
      return false;
    value = static_cast<std::int32_t>(as_double);
    return value >= 0;
  }

  static samples parse(const std::filesystem::path& path, int label_column, bool has_header) {
    const std::vector<std::uint8_t> bytes = read_file_bytes(path);
    const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    const auto fail = [&](std::size_t line, std::size_t offset, const std::string& what) {
      return std::runtime_error("csv: " + path.string() + " line " + std::to_string(line) + " (byte offset " +
                                std::to_string(offset) + "): " + what);
    };

    std::vector<float> features;  // (n, Columns - 1)
    std::vector<Label> labels;    // (n)
    bool header_pending = has_header;
    std::size_t line_number = 0;
    for (std::size_t line_start = 0; line_start < text.size();) {
      std::size_t line_end = text.find('\n', line_start);
      if (line_end == std::string_view::npos) line_end = text.size();
      std::string_view line = text.substr(line_start, line_end - line_start);
      const std::size_t offset = line_start;
      line_start = line_end + 1;
      ++line_number;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (trimmed(line).empty()) continue;

      // Split into exactly Columns fields, or say how many there are.
      std::string_view fields[Columns];
      std::size_t count = 0, field_start = 0;
      for (;;) {
        const std::size_t comma = line.find(',', field_start);
        const std::size_t field_end = comma == std::string_view::npos ? line.size() : comma;
        if (count < static_cast<std::size_t>(Columns))
          fields[count] = line.substr(field_start, field_end - field_start);
        ++count;
        if (comma == std::string_view::npos) break;
        field_start = comma + 1;
      }
      if (count != static_cast<std::size_t>(Columns))
        throw fail(line_number, offset,
                   std::string(header_pending ? "the header" : "the line") + " has " + std::to_string(count) +
                       " columns, expected " + std::to_string(Columns));
      if (header_pending) {
        header_pending = false;
        continue;
      }

      for (int column = 0; column < Columns; ++column) {
        const std::string_view field = trimmed(fields[column]);
        const std::size_t field_offset = offset + static_cast<std::size_t>(fields[column].data() - line.data());
        const auto bad = [&](const char* what) {
          return fail(line_number, field_offset,
                      "column " + std::to_string(column + 1) + ": \"" + excerpt(field) + "\" " + what);
        };
        if (column == label_column) {
          Label label{};
          if constexpr (std::is_same_v<Label, std::int32_t>) {
            if (!parse_class_id(field, label)) throw bad("is not an integer class id, 0 or more (the label column)");
          } else {
            if (!parse_float(field, label)) throw bad("is not a number (the label column)");
          }
          labels.push_back(label);
        } else {
          float value = 0;
          if (!parse_float(field, value)) throw bad("is not a number");
          features.push_back(value);
        }
      }
    }
    return samples(std::move(features), std::move(labels));
  }

  samples samples_;
};

template <int Columns, class Label = std::int32_t>
csv_dataset<Columns, Label> csv(const std::filesystem::path& path, int label_column, bool has_header = false) {
  return csv_dataset<Columns, Label>(path, label_column, has_header);
}

}  // namespace typeflow::data

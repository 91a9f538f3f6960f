// Fields of a JSON file typeflow wrote (a checkpoint's manifest.json), read
// as what they must be before they are converted: a whole number of the
// JSON type within the C++ type's range, a finite number within a float's.
// Converting a float such as 1e300 to an int, or -1.5 to an unsigned, is
// undefined behaviour, and 2.5 would be truncated and accepted.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace typeflow::io {

// object[field] as a T; std::invalid_argument naming the field when it is
// not a whole number in T's range (nlohmann's out_of_range when absent).
template <class T>
T whole_number(const nlohmann::json& object, const char* field) {
  static_assert(std::is_integral_v<T> && sizeof(T) <= 8);
  const nlohmann::json& value = object.at(field);
  const auto refuse = [&](const char* what) {
    return std::invalid_argument("\"" + std::string(field) + "\" is " + what + " (" + value.dump() + ")");
  };
  if (!value.is_number_integer()) throw refuse("not a whole number");
  if (value.is_number_unsigned()) {
    const std::uint64_t u = value.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) throw refuse("out of range");
    return static_cast<T>(u);
  }
  const std::int64_t s = value.get<std::int64_t>();
  if constexpr (std::is_unsigned_v<T>) {
    if (s < 0) throw refuse("negative");
    if (static_cast<std::uint64_t>(s) > static_cast<std::uint64_t>(std::numeric_limits<T>::max()))
      throw refuse("out of range");
  } else {
    if (s < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
        s > static_cast<std::int64_t>(std::numeric_limits<T>::max()))
      throw refuse("out of range");
  }
  return static_cast<T>(s);
}

// object[field] as a float: a finite number within a float's range.
inline float finite_float(const nlohmann::json& object, const char* field) {
  const nlohmann::json& value = object.at(field);
  if (!value.is_number()) throw std::invalid_argument("\"" + std::string(field) + "\" is not a number");
  const double d = value.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max())
    throw std::invalid_argument("\"" + std::string(field) + "\" is out of a float's range (" + value.dump() + ")");
  return static_cast<float>(d);
}

}  // namespace typeflow::io

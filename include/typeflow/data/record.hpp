// record<part<"name", tensor_value<T, Shape>>...>: one sample's named
// tensors, what a model with several inputs or outputs takes as features
// and labels (Keras's dicts of features and labels).
//
//   auto features = data::parts(data::named<"image">(e.features), data::named<"ink">(ink));
//   features.get<"ink">()[0]                       // a tensor_value, by name
//   example{features, data::parts(data::named<"class">(e.label), ...)}
//
// Each part keeps its own type (float32 features, int32 ids or class ids).
// Batched, a record is one row of 4-byte slots, the parts side by side in
// order (int32 parts bit for bit): the packed row functional<> unpacks by
// its input nodes' names, and the per-output losses read by their outputs'.
// A record is a plain aggregate, trivially copyable, so map, shuffle and
// cache() move it as they move any example.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <utility>

#include "typeflow/core/fixed_string.hpp"
#include "typeflow/data/example.hpp"

namespace typeflow::data {

template <fixed_string Name, class Value>
struct part {
  static_assert(std::is_same_v<typename Value::value_type, float> ||
                    std::is_same_v<typename Value::value_type, std::int32_t>,
                "part<Name, tensor_value<T, Shape>>: a part holds float or std::int32_t values");
  static constexpr std::string_view name = Name.view();
  using value_type = Value;
};

namespace detail {
// The parts' values, one member each (an aggregate: trivially copyable).
template <class... Values>
struct part_values {};
template <class First, class... Rest>
struct part_values<First, Rest...> {
  First first;
  [[no_unique_address]] part_values<Rest...> rest;
};
template <std::size_t I, class Values>
constexpr auto& value_at(Values& values) {
  if constexpr (I == 0)
    return values.first;
  else
    return value_at<I - 1>(values.rest);
}
}  // namespace detail

template <class... Parts>
struct record {
  static_assert(sizeof...(Parts) > 0, "record<Parts...>: give at least one part");
  static constexpr std::size_t count = sizeof...(Parts);
  static constexpr std::array<std::string_view, count> names{Parts::name...};
  static constexpr std::array<std::size_t, count> sizes{Parts::value_type::size...};
  static constexpr std::array<bool, count> int32{std::is_same_v<typename Parts::value_type::value_type, std::int32_t>...};
  static constexpr std::array<std::size_t, count> offsets = [] {
    std::array<std::size_t, count> at{};
    for (std::size_t j = 1; j < count; ++j) at[j] = at[j - 1] + sizes[j - 1];
    return at;
  }();
  // Batched, one sample is `size` 4-byte slots.
  using value_type = float;
  using shape_type = shape<static_cast<int>((Parts::value_type::size + ...))>;
  static constexpr std::size_t size = (Parts::value_type::size + ...);
  static constexpr bool is_record = true;
  static_assert([] {
    for (std::size_t a = 0; a < count; ++a)
      for (std::size_t b = a + 1; b < count; ++b)
        if (names[a] == names[b]) return false;
    return true;
  }(), "record<Parts...>: two parts have one name");

  detail::part_values<typename Parts::value_type...> values{};

  static constexpr std::size_t index_of(std::string_view name) {
    for (std::size_t j = 0; j < count; ++j)
      if (names[j] == name) return j;
    return count;
  }
  template <fixed_string Name>
  auto& get() {
    constexpr std::size_t j = index_of(Name.view());
    static_assert(j < count, "record::get<Name>: the record has no part of that name");
    return detail::value_at<j>(values);
  }
  template <fixed_string Name>
  const auto& get() const {
    constexpr std::size_t j = index_of(Name.view());
    static_assert(j < count, "record::get<Name>: the record has no part of that name");
    return detail::value_at<j>(values);
  }
  template <std::size_t I>
  auto& at() {
    return detail::value_at<I>(values);
  }
  template <std::size_t I>
  const auto& at() const {
    return detail::value_at<I>(values);
  }

  // One row of 4-byte slots, the parts side by side, bits as they are.
  void pack(float* row) const {
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      (std::memcpy(row + offsets[J], at<J>().data(), sizes[J] * 4), ...);
    }(std::make_index_sequence<count>{});
  }
  // The reverse: the parts from a packed row (unbatch).
  void unpack(const float* row) {
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      (std::memcpy(at<J>().data(), row + offsets[J], sizes[J] * 4), ...);
    }(std::make_index_sequence<count>{});
  }
};

template <class T>
inline constexpr bool is_record_v = requires { T::is_record; };

// named<"image">(value): a value with its part's name, for parts(...).
template <fixed_string Name, class Value>
struct named_value {
  Value value;
  using part_type = part<Name, Value>;
};
template <fixed_string Name, class Value>
named_value<Name, Value> named(const Value& value) {
  return {value};
}
// parts(named<"a">(x), named<"b">(y)): the record of those parts.
template <class... Named>
auto parts(const Named&... values) {
  record<typename Named::part_type...> r;
  [&]<std::size_t... J>(std::index_sequence<J...>) {
    ((r.template at<J>() = values.value), ...);
  }(std::index_sequence_for<Named...>{});
  return r;
}

namespace detail {
// What batch<N> does with a sample's features or label: a record packs its
// parts into the row; a tensor_value is its values.
template <class Value, class Slot>
void put_row(const Value& value, Slot* row) {
  if constexpr (is_record_v<Value>)
    value.pack(row);
  else
    std::copy_n(value.data(), Value::size, row);
}
// unbatch's reverse of put_row.
template <class Value, class Slot>
void take_row(const Slot* row, Value& value) {
  if constexpr (is_record_v<Value>)
    value.unpack(row);
  else
    std::copy_n(row, Value::size, value.data());
}
}  // namespace detail

}  // namespace typeflow::data

// Element types as tags: what a tensor holds, how it is named in files.
//
// A dtype tag carries the C++ storage type and the safetensors name. The
// precision policies (float32 now; mixed_float16 and mixed_bfloat16 later)
// are built from these tags; float16 and bfloat16 hold the storage types of
// core/half.hpp, and typed_input<int32, T> takes token ids.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "typeflow/core/half.hpp"

namespace typeflow {

struct float32 {
  using value_type = float;
  static constexpr std::string_view name = "float32";
  static constexpr std::string_view safetensors_name = "F32";
};

struct float16 {
  using value_type = f16;
  static constexpr std::string_view name = "float16";
  static constexpr std::string_view safetensors_name = "F16";
};

struct bfloat16 {
  using value_type = bf16;
  static constexpr std::string_view name = "bfloat16";
  static constexpr std::string_view safetensors_name = "BF16";
};

struct int32 {
  using value_type = std::int32_t;
  static constexpr std::string_view name = "int32";
  static constexpr std::string_view safetensors_name = "I32";
};

struct uint8 {
  using value_type = std::uint8_t;
  static constexpr std::string_view name = "uint8";
  static constexpr std::string_view safetensors_name = "U8";
};

template <class T>
concept dtype = requires {
  typename T::value_type;
  { T::name } -> std::convertible_to<std::string_view>;
  { T::safetensors_name } -> std::convertible_to<std::string_view>;
};

// The tag for a C++ element type, for tensors built from plain arrays.
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  using type = float32;
};
template <>
struct dtype_of<f16> {
  using type = float16;
};
template <>
struct dtype_of<bf16> {
  using type = bfloat16;
};
template <>
struct dtype_of<std::int32_t> {
  using type = int32;
};
template <>
struct dtype_of<std::uint8_t> {
  using type = uint8;
};
template <class T>
using dtype_of_t = typename dtype_of<T>::type;

}  // namespace typeflow

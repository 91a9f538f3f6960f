// A string usable as a template argument: parameter names live in types.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <string_view>

namespace typeflow {

template <std::size_t N>
struct fixed_string {
  char chars[N]{};
  constexpr fixed_string(const char (&text)[N]) { std::copy_n(text, N, chars); }
  constexpr std::string_view view() const { return {chars, N - 1}; }
};

}  // namespace typeflow

namespace typeflow {

// Names built at compile time from parts, for parameters inside combinators
// ("blocks.3.attn.qkv.kernel"). A part is a type with a static constexpr
// std::string_view `value`; joined_name puts dots between the parts.
template <class... Parts>
struct joined_name {
  static constexpr std::size_t length = [] {
    std::size_t n = 0;
    ((n += Parts::value.size()), ...);
    return n + (sizeof...(Parts) > 0 ? sizeof...(Parts) - 1 : 0);
  }();
  static constexpr auto storage = [] {
    std::array<char, length + 1> out{};
    std::size_t at = 0;
    bool first = true;
    auto put = [&](std::string_view part) {
      if (!first) out[at++] = '.';
      first = false;
      for (char c : part) out[at++] = c;
    };
    (put(Parts::value), ...);
    return out;
  }();
  static constexpr std::string_view value{storage.data(), length};
};

// A number as a name part: "3".
template <std::size_t N>
struct number_name {
  static constexpr std::size_t digits = [] {
    std::size_t d = 1;
    for (std::size_t v = N; v >= 10; v /= 10) ++d;
    return d;
  }();
  static constexpr auto storage = [] {
    std::array<char, digits + 1> out{};
    std::size_t v = N;
    for (std::size_t i = digits; i-- > 0; v /= 10) out[i] = static_cast<char>('0' + v % 10);
    return out;
  }();
  static constexpr std::string_view value{storage.data(), digits};
};

// Keras's unique layer names: "dense", then "dense_1", "dense_2", ...
template <class Base, std::size_t Occurrence>
struct occurrence_name {
  static constexpr auto storage = [] {
    std::array<char, Base::value.size() + 1 + number_name<Occurrence>::digits + 1> out{};
    std::size_t at = 0;
    for (char c : Base::value) out[at++] = c;
    if (Occurrence > 0) {
      out[at++] = '_';
      for (char c : number_name<Occurrence>::value) out[at++] = c;
    }
    return out;
  }();
  static constexpr std::string_view value{storage.data(),
                                          Base::value.size() + (Occurrence > 0 ? 1 + number_name<Occurrence>::digits : 0)};
};

}  // namespace typeflow

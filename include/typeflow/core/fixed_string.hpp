// A string usable as a template argument: parameter names live in types.
#pragma once

#include <algorithm>
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

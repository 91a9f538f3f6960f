// Input quoted in an error message: whole when short, else its start and
// its length, so that a 10 MB tensor name or CSV line gives a message of one
// line, not of 10 MB.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace typeflow {

inline std::string excerpt(std::string_view text, std::size_t most = 120) {
  if (text.size() <= most) return std::string(text);
  return std::string(text.substr(0, most)) + "...(" + std::to_string(text.size()) + " bytes)";
}

}  // namespace typeflow

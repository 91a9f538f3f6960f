// The PyTorch fixtures in tests/reference/, each written by the Python (or
// node) script beside it; the suite reads only the JSON.
#pragma once

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace typeflow::testing {

// tests/reference/<name>, parsed; throws naming the path if it is missing.
inline nlohmann::json read_reference(const std::string& name) {
  const auto path = std::filesystem::path(__FILE__).parent_path().parent_path() / "reference" / name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return nlohmann::json::parse(in);
}

}  // namespace typeflow::testing

// The PyTorch fixtures in tests/reference/, each written by the Python (or
// node) script beside it; the suite reads only the JSON.
#pragma once

#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

namespace typeflow::testing {

// tests/reference/<name>, parsed; throws naming the path if it is missing.
inline nlohmann::json read_reference(const std::string& name) {
  const auto path = std::filesystem::path(__FILE__).parent_path().parent_path() / "reference" / name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return nlohmann::json::parse(in);
}

// Sets each parameter the reference's "weights" names to its values.
template <class Model>
void load_reference_weights(Model& net, const nlohmann::json& reference) {
  for (const auto& [name, values] : reference["weights"].items()) {
    auto weights = net.parameter(name);
    REQUIRE(weights.size() == values.size());
    for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = values[i].template get<float>();
  }
}

// Checks the last step's gradient of each parameter the reference's
// "gradients" names, to 1e-4 relative plus 1e-5; returns the values compared.
template <class Model>
int check_reference_gradients(const Model& net, const nlohmann::json& reference) {
  int compared = 0;
  for (const auto& [name, expected] : reference["gradients"].items()) {
    const auto gradient = net.gradient(name);
    REQUIRE(gradient.size() == expected.size());
    for (std::size_t i = 0; i < gradient.size(); ++i) {
      const double want = expected[i].template get<double>();
      INFO(name << "[" << i << "]: typeflow " << gradient[i] << ", PyTorch " << want);
      CHECK(std::fabs(gradient[i] - want) <= 1e-4 * std::fabs(want) + 1e-5);
      ++compared;
    }
  }
  return compared;
}

}  // namespace typeflow::testing

// Helpers shared by the test files: a scratch directory, the data sets
// scripts/setup.sh fetches, a dataset's elements, and error messages.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include <doctest/doctest.h>

namespace typeflow::testing {

// A fresh directory under the system temp dir, removed with its files at scope exit.
struct temp_dir {
  std::filesystem::path path;
  explicit temp_dir(const std::string& prefix = "typeflow_test") {
    std::random_device entropy;
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    for (int attempt = 0;; ++attempt) {
      path = std::filesystem::temp_directory_path() /
             (prefix + "_" + std::to_string(now) + "_" + std::to_string(entropy()));
      if (std::filesystem::create_directory(path)) return;
      REQUIRE(attempt < 100);
    }
  }
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  // The names of the files in the directory, sorted.
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path)) names.push_back(entry.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
};

// Where the data sets live: $TYPEFLOW_DATA_DIR (ctest sets it to <repo>/data),
// else <repo>/data.
inline std::filesystem::path data_dir() {
  if (const char* root = std::getenv("TYPEFLOW_DATA_DIR")) return root;
  return std::filesystem::path(__FILE__).lexically_normal().parent_path().parent_path().parent_path() / "data";
}

// data_dir() / name; fails the current test (not a skip) when it is absent,
// naming the setup.sh function that fetches it.
inline std::filesystem::path require_data(const std::string& name, const std::string& setup_function) {
  const std::filesystem::path dir = data_dir() / name;
  REQUIRE_MESSAGE(std::filesystem::is_directory(dir),
                  name << " not found at " << std::filesystem::absolute(dir).string()
                       << ": run scripts/setup.sh (or source it and run " << setup_function
                       << "), or set TYPEFLOW_DATA_DIR to the directory that holds " << name << "/");
  return dir;
}

// What call() throws as an E, or "" if it throws nothing.
template <class E, class Call>
std::string message_of(Call&& call) {
  try {
    call();
  } catch (const E& error) {
    return error.what();
  }
  return "";
}

// Every element of one pass over a dataset, in order.
template <class Dataset>
std::vector<typename Dataset::element_type> collect(const Dataset& dataset, std::uint64_t epoch = 0) {
  std::vector<typename Dataset::element_type> out;
  auto cursor = dataset.open(epoch);
  typename Dataset::element_type element{};
  while (cursor.next(element)) out.push_back(element);
  return out;
}

// The label (a scalar class id) of every element of one pass.
template <class Dataset>
std::vector<std::int32_t> labels_of(const Dataset& dataset, std::uint64_t epoch = 0) {
  std::vector<std::int32_t> out;
  for (const auto& element : collect(dataset, epoch)) out.push_back(element.label[0]);
  return out;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace typeflow::testing

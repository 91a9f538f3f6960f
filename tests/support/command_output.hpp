// command_output: runs a shell command and returns what it printed on
// standard output, failing the test when it exits with another status than 0.
#pragma once

#include <cstdio>
#include <string>

#include <doctest/doctest.h>

namespace typeflow::testing {

inline std::string command_output(const std::string& command) {
  std::string out;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[8192];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  const int status = ::pclose(pipe);
  INFO(command);
  REQUIRE(status == 0);
  return out;
}

}  // namespace typeflow::testing

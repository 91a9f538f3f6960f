// The translation unit behind the typeflow_pch target (CMakeLists.txt): CMake
// compiles typeflow.hpp into a precompiled header for it, which the tests,
// examples and benchmarks reuse. It has nothing of its own.

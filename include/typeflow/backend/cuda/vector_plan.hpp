// How the CUDA element-wise kernels split n elements into 16-byte vectors:
// a scalar head (until every pointer sits on a 16-byte boundary), whole
// vectors of `width` elements, and a scalar tail. Plain C++ (no CUDA
// headers), so the CPU tests check the very index arithmetic the kernels use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "typeflow/core/host_device.hpp"

namespace typeflow::backend::cuda {

inline constexpr std::size_t vector_bytes = 16;

struct vector_plan {
  std::size_t head = 0;     // scalar elements [0, head)
  std::size_t vectors = 0;  // vector v covers [head + v * width, head + (v + 1) * width)
  std::size_t tail = 0;     // scalar elements after the vectors
  std::size_t width = 1;

  TYPEFLOW_HOST_DEVICE constexpr std::size_t scalars() const { return head + tail; }
  // The element that scalar item j (j < scalars()) stands for.
  TYPEFLOW_HOST_DEVICE constexpr std::size_t scalar_index(std::size_t j) const {
    return j < head ? j : head + vectors * width + (j - head);
  }
  TYPEFLOW_HOST_DEVICE constexpr std::size_t vector_index(std::size_t v) const { return head + v * width; }
  // Threads a grid-stride loop wants: vectors and scalars run in the same pass.
  TYPEFLOW_HOST_DEVICE constexpr std::size_t items() const { return vectors > scalars() ? vectors : scalars(); }
};

struct pointer_alignment {
  std::uintptr_t address;
  std::size_t element_bytes;
};

// The smallest head after which every pointer is 16-byte aligned. `width`
// elements of each pointer must span whole 16-byte units, so a head exists
// below `width` whenever one exists at all; a pointer that is not even
// aligned to its own element size (or pointers whose misalignments disagree)
// leave everything scalar.
constexpr vector_plan split_vectorised(std::size_t n, std::size_t width,
                                       std::initializer_list<pointer_alignment> pointers) {
  for (std::size_t h = 0; h < width && h < n; ++h) {
    bool aligned = true;
    for (const pointer_alignment& p : pointers) aligned = aligned && (p.address + h * p.element_bytes) % vector_bytes == 0;
    if (aligned) return {h, (n - h) / width, (n - h) % width, width};
  }
  return {n, 0, 0, width};
}

// The same split for elements [begin, begin + n) of arrays whose bases are
// all 16-byte aligned and hold elements of 16 / width bytes (the optimizer's
// chunks): the head runs up to the next multiple of width.
TYPEFLOW_HOST_DEVICE constexpr vector_plan split_from(std::size_t begin, std::size_t n, std::size_t width) {
  const std::size_t h = (width - begin % width) % width;
  if (h >= n) return {n, 0, 0, width};
  return {h, (n - h) / width, (n - h) % width, width};
}

}  // namespace typeflow::backend::cuda

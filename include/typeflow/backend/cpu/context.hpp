// The CPU backend's context: one oneDNN engine and stream per model.
//
// Primitives and memory objects are created against this context once, when
// a model is set up for a batch size, and then only executed.
//
// nvcc 13's front end crashes ("internal error ... find_allocated_name_reference")
// on oneDNN's C++ header in C++20 mode: it cannot destroy the header's
// typedef'd unnamed structs held in std::vector. So a CUDA translation unit
// parses no CPU executor (train/cpu_engine.hpp includes them only outside nvcc;
// matmul.hpp and conv2d.hpp refuse nvcc with an #error), and the context is
// an empty struct there, so that a CPU model can be constructed: CPU models are trained
// by g++ in .cpp files (model<..., cpu> says so if instantiated under nvcc).
#pragma once

#if defined(__CUDACC__)
#define TYPEFLOW_HAS_ONEDNN_CPP 0
#else
#define TYPEFLOW_HAS_ONEDNN_CPP 1
#endif

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "typeflow/core/parallel.hpp"
#include "typeflow/backend/device.hpp"
#include "typeflow/precision/weight_copies.hpp"

#if TYPEFLOW_HAS_ONEDNN_CPP
#include <oneapi/dnnl/dnnl.hpp>

#include "typeflow/backend/cpu/products_16bit.hpp"

namespace typeflow::backend::cpu {

struct context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  // bfloat16 products as oneDNN bf16 primitives (backend/cpu/products_16bit.hpp).
  bool native_bf16 = native_bf16_products();
  // Their layers' bf16 copies of the weights (precision/weight_copies.hpp).
  precision::weight_copies weight_copies;
};

}  // namespace typeflow::backend::cpu
#else
namespace typeflow::backend::cpu {
inline bool native_bf16_products() { return false; }
struct context {
  bool native_bf16 = false;
  precision::weight_copies weight_copies;
};
}  // namespace typeflow::backend::cpu
#endif

namespace typeflow::backend::cpu {

// The bytes a step program lends its executors' libraries (oneDNN's
// scratchpads), 64-byte aligned; none for a zero count.
class scratchpad {
 public:
  explicit scratchpad(std::size_t bytes) {
    if (bytes == 0) return;
    void* raw = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!raw) throw std::bad_alloc();
    data_.reset(static_cast<std::byte*>(raw));
  }
  std::byte* data() const noexcept { return data_.get(); }

 private:
  struct deleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<std::byte, deleter> data_;
};

// What the device-independent executors (combinators) ask of a device,
// found by argument-dependent lookup on the context.
inline void copy_bytes(context&, void* to, const void* from, std::size_t bytes) { std::memcpy(to, from, bytes); }
// to[i] += from[i]
inline void add_in_place(context&, float* to, const float* from, std::size_t count) {
  parallel_for(static_cast<std::ptrdiff_t>(count), [=](std::ptrdiff_t i) { to[i] += from[i]; });
}
// f(i) for i in [0, n): an element functor written once for both devices
// (TYPEFLOW_HOST_DEVICE; the merge layers' executors use it).
template <class F>
inline void for_each_index(context&, std::size_t n, F f) {
  parallel_for(static_cast<std::ptrdiff_t>(n), [=](std::ptrdiff_t i) { f(static_cast<std::size_t>(i)); });
}

}  // namespace typeflow::backend::cpu

// The CPU backend's context: one oneDNN engine and stream per model.
//
// Primitives and memory objects are created against this context once, when
// a model is set up for a batch size, and then only executed.
//
// nvcc 13's front end crashes ("internal error ... find_allocated_name_reference")
// on oneDNN's C++ header in C++20 mode: it cannot destroy the header's
// typedef'd unnamed structs held in std::vector. So a CUDA translation unit
// sees the CPU backend's interfaces without oneDNN behind them: it can name every
// layer and run models on tf::cuda, while CPU models are built by g++ in .cpp
// files (model<..., cpu> says so if instantiated under nvcc).
#pragma once

#if defined(__CUDACC__)
#define TYPEFLOW_HAS_ONEDNN_CPP 0
#else
#define TYPEFLOW_HAS_ONEDNN_CPP 1
#endif

#if TYPEFLOW_HAS_ONEDNN_CPP
#include <oneapi/dnnl/dnnl.hpp>

namespace typeflow::backend::cpu {

struct context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

}  // namespace typeflow::backend::cpu
#else
namespace typeflow::backend::cpu {
struct context {};
}  // namespace typeflow::backend::cpu
#endif

// The CPU backend's context: one oneDNN engine and stream per model.
//
// Primitives and memory objects are created against this context once, when
// a model is set up for a batch size, and then only executed.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace typeflow::backend::cpu {

struct context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

}  // namespace typeflow::backend::cpu

// The device an example is built for: the CPU, or one GPU where the example
// is built a second time as <name>_cuda with TYPEFLOW_EXAMPLE_CUDA
// (examples/CMakeLists.txt). The model type is the same on both; only its
// device parameter differs.
#pragma once

#ifdef TYPEFLOW_EXAMPLE_CUDA
#include <typeflow/cuda.hpp>
#else
#include <typeflow/typeflow.hpp>
#endif

namespace example {

#ifdef TYPEFLOW_EXAMPLE_CUDA
using device = typeflow::cuda;
inline constexpr bool on_gpu = true;
#else
using device = typeflow::cpu;
inline constexpr bool on_gpu = false;
#endif

}  // namespace example

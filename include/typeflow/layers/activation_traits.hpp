// Which layer specs a matmul may fuse as its epilogue. Specialised by the
// activation layers; anything else leaves the product unfused.
#pragma once

#include "typeflow/core/gemm.hpp"

namespace typeflow {

template <class Spec>
inline constexpr epilogue fusable_epilogue = epilogue::none;

// Whether a spec is a matmul layer whose output an activation may take over.
template <class Spec>
inline constexpr bool fuses_epilogue = false;

// Whether a matmul spec bound for the GPU also takes gelu_tanh (a dense:
// cuBLASLt's GELU_AUX_BIAS writes gelu(x·W + b) and keeps x·W + b for the
// backward, which multiplies d_out by gelu' itself). gelu' is not a function
// of gelu's output, so relu, tanh and sigmoid's way (the activation's
// backward from the output) does not do, and the CPU keeps gelu_tanh apart.
template <class Spec>
inline constexpr bool fuses_gelu_on_gpu = false;

// The epilogue a matmul Matmul runs for the activation Next after it, in a
// network bound for the GPU (Gpu) or the CPU; both layers ask this.
template <class Matmul, class Next, bool Gpu>
inline constexpr epilogue epilogue_between =
    !fuses_epilogue<Matmul>                           ? epilogue::none
    : fusable_epilogue<Next> != epilogue::gelu_tanh   ? fusable_epilogue<Next>
    : Gpu && fuses_gelu_on_gpu<Matmul>                ? epilogue::gelu_tanh
                                                      : epilogue::none;

}  // namespace typeflow

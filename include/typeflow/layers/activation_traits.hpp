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

}  // namespace typeflow

// backend/cuda/softmax_cross_entropy.hpp's kernels and launchers, compiled once
// (typeflow::cuda's kernel library).
#include "typeflow/backend/cuda/kernels/softmax_cross_entropy.cuh"

// backend/cuda/layer_norm.hpp's kernels and launchers, compiled once
// (typeflow::cuda's kernel library).
#include "typeflow/backend/cuda/kernels/layer_norm.cuh"

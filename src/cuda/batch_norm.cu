// backend/cuda/batch_norm.hpp's kernels and launchers, compiled once
// (typeflow::cuda's kernel library).
#include "typeflow/backend/cuda/kernels/batch_norm.cuh"

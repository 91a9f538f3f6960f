// backend/cuda/attention.hpp's kernels and launchers, compiled once
// (typeflow::cuda's kernel library).
#include "typeflow/backend/cuda/kernels/attention.cuh"

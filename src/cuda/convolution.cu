// backend/cuda/convolution.hpp's kernels and launchers, compiled once
// (typeflow::cuda's kernel library).
#include "typeflow/backend/cuda/kernels/convolution.cuh"

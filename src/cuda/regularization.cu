// backend/cuda/regularization.hpp's kernels and launcher, compiled once
// (typeflow::cuda's kernel library).
#include "typeflow/backend/cuda/kernels/regularization.cuh"

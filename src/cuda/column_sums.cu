// backend/cuda/column_sums.hpp's kernel and launcher, compiled once
// (typeflow::cuda's kernel library).
#include "typeflow/backend/cuda/kernels/column_sums.cuh"

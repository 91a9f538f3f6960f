// backend/cuda/metric_hits.hpp's kernels and launcher, compiled once
// (typeflow::cuda's kernel library).
#include "typeflow/backend/cuda/kernels/metric_hits.cuh"

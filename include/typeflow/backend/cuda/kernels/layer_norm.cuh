// The kernels of backend/cuda/layer_norm.hpp and its launchers' definitions.
// Compiled once by nvcc into typeflow::cuda's kernel library
// (src/cuda/layer_norm.cu); to build without that library, compile that one
// source into your program instead. Include it nowhere else: the launchers
// are ordinary (not inline) functions.
#pragma once
#include "typeflow/backend/cuda/layer_norm.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/core/row_math.hpp"

namespace typeflow::backend::cuda {

namespace layer_norm_detail {

namespace rm = typeflow::row_math;
namespace gpu = typeflow::row_math::gpu;

// ---------------------------------------------------------------------------
// Forward.

template <int kGroup, bool kVec>
__global__ void __launch_bounds__(gpu::block_threads<kGroup>)
    forward_held(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd, int rows,
                 int n, float epsilon) {
  using row = gpu::held_row<kGroup, kVec>;
  using chunk = typename row::chunk_type;
  constexpr int W = row::width;
  constexpr int kRows = gpu::rows_per_block<kGroup>;
  __shared__ rm::mean_m2 slots[gpu::slot_count<kGroup>];
  const int t = static_cast<int>(threadIdx.x) % kGroup;
  // kGroup > 32: one row per block, so the loop is uniform over the block.
  for (int r = static_cast<int>(blockIdx.x) * kRows + static_cast<int>(threadIdx.x) / kGroup; r < rows;
       r += static_cast<int>(gridDim.x) * kRows) {
    const std::size_t base = static_cast<std::size_t>(r) * static_cast<std::size_t>(n);
    chunk v[row::chunks];
    rm::mean_m2 s = rm::mean_m2_empty();
#pragma unroll
    for (int i = 0; i < row::chunks; ++i) {
      const int j = row::first_column(t, i);
      if (j < n) {
        v[i] = chunk::load(x + base + j);
#pragma unroll
        for (int e = 0; e < W; ++e) s = rm::mean_m2_push(s, v[i].v[e]);
      }
    }
    s = gpu::group_reduce<kGroup>(s, rm::mean_m2_empty(), rm::mean_m2_merger{}, slots);
    const float mu = s.mean;
    const float inverse_std = rm::layer_norm_inverse_std(s, epsilon);
    if (t == 0) {
      if (mean) mean[r] = mu;
      if (rstd) rstd[r] = inverse_std;
    }
#pragma unroll
    for (int i = 0; i < row::chunks; ++i) {
      const int j = row::first_column(t, i);
      if (j < n) {
        const chunk g = gamma ? chunk::load(gamma + j) : chunk::filled(1.f);
        const chunk b = beta ? chunk::load(beta + j) : chunk::filled(0.f);
        chunk out;
#pragma unroll
        for (int e = 0; e < W; ++e)
          out.v[e] = rm::layer_norm_output(rm::layer_norm_normalize(v[i].v[e], mu, inverse_std), g.v[e], b.v[e]);
        out.store(y + base + j);
      }
    }
  }
}

// One row per 1024-thread block, x read twice.
template <bool kVec>
__global__ void __launch_bounds__(1024)
    forward_streamed(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                     int rows, int n, float epsilon) {
  using chunk = gpu::chunk<kVec>;
  constexpr int W = chunk::width;
  constexpr int kStride = 1024 * W;
  __shared__ rm::mean_m2 slots[gpu::slot_count<0>];
  const int start = static_cast<int>(threadIdx.x) * W;
  for (int r = static_cast<int>(blockIdx.x); r < rows; r += static_cast<int>(gridDim.x)) {
    const std::size_t base = static_cast<std::size_t>(r) * static_cast<std::size_t>(n);
    rm::mean_m2 s = rm::mean_m2_empty();
    for (int j = start; j < n; j += kStride) {
      const chunk v = chunk::load(x + base + j);
#pragma unroll
      for (int e = 0; e < W; ++e) s = rm::mean_m2_push(s, v.v[e]);
    }
    s = gpu::group_reduce<0>(s, rm::mean_m2_empty(), rm::mean_m2_merger{}, slots);
    const float mu = s.mean;
    const float inverse_std = rm::layer_norm_inverse_std(s, epsilon);
    if (threadIdx.x == 0) {
      if (mean) mean[r] = mu;
      if (rstd) rstd[r] = inverse_std;
    }
    for (int j = start; j < n; j += kStride) {
      const chunk v = chunk::load(x + base + j);
      const chunk g = gamma ? chunk::load(gamma + j) : chunk::filled(1.f);
      const chunk b = beta ? chunk::load(beta + j) : chunk::filled(0.f);
      chunk out;
#pragma unroll
      for (int e = 0; e < W; ++e)
        out.v[e] = rm::layer_norm_output(rm::layer_norm_normalize(v.v[e], mu, inverse_std), g.v[e], b.v[e]);
      out.store(y + base + j);
    }
  }
}

// ---------------------------------------------------------------------------
// Backward.
//
// Block b owns rows [b * rows_per_part, (b + 1) * rows_per_part) and writes
// its column sums of dy * x̂ and dy to row b of the partial arrays (partials
// x n each); reduce_partials then adds the rows of those in a fixed order.

// Minimum rows per part (bounds the partials' traffic to ~1/8 of x and dy's)
// and the threads the parts should keep busy (about half an H200's).
inline constexpr int kMinRowsPerPart = 16;
inline constexpr int kTargetThreads = 1 << 17;
inline constexpr int kStreamedRowsPerPart = 64;
inline constexpr int kMostStreamedParts = 1024;  // bounds the workspace for very many rows

struct backward_plan {
  int parts = 0;
  int rows_per_part = 0;
};

inline constexpr int ceil_div(int a, int b) { return a / b + (a % b != 0 ? 1 : 0); }

// A function of the shape alone, so that the workspace can be sized before
// any call (and the result does not depend on the device).
inline backward_plan plan_backward(int rows, int n) {
  if (rows <= 0 || n <= 0) return {};
  const int group = gpu::group_for(n);
  int rows_per_part = ceil_div(rows, kMostStreamedParts);
  if (rows_per_part < kStreamedRowsPerPart) rows_per_part = kStreamedRowsPerPart;
  if (group != 0) {
    const int threads = group == 32 ? 128 : group;
    const int wanted_parts = ceil_div(kTargetThreads, threads);
    rows_per_part = ceil_div(rows, wanted_parts);
    if (rows_per_part < kMinRowsPerPart) rows_per_part = kMinRowsPerPart;
  }
  return {ceil_div(rows, rows_per_part), rows_per_part};
}

template <int kGroup, bool kVec>
__global__ void __launch_bounds__(gpu::block_threads<kGroup>)
    backward_held(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy, float* dx,
                  float* partial_gamma, float* partial_beta, int rows, int n, int rows_per_part) {
  using row = gpu::held_row<kGroup, kVec>;
  using chunk = typename row::chunk_type;
  constexpr int W = row::width;
  constexpr int kGroups = gpu::rows_per_block<kGroup>;
  __shared__ rm::sum_pair slots[gpu::slot_count<kGroup>];
  const int t = static_cast<int>(threadIdx.x) % kGroup;
  const int group = static_cast<int>(threadIdx.x) / kGroup;
  const int first = static_cast<int>(blockIdx.x) * rows_per_part;
  const int last = rows - first < rows_per_part ? rows : first + rows_per_part;

  chunk sum_dy_xhat[row::chunks], sum_dy[row::chunks];
#pragma unroll
  for (int i = 0; i < row::chunks; ++i) sum_dy_xhat[i] = sum_dy[i] = chunk::filled(0.f);

  // kGroup > 32: one group per block, so the loop is uniform over the block.
  for (int r = first + group; r < last; r += kGroups) {
    const std::size_t base = static_cast<std::size_t>(r) * static_cast<std::size_t>(n);
    const float mu = mean[r], inverse_std = rstd[r];
    chunk xhat[row::chunks], g[row::chunks];
    rm::sum_pair s{0.f, 0.f};
#pragma unroll
    for (int i = 0; i < row::chunks; ++i) {
      const int j = row::first_column(t, i);
      if (j < n) {
        const chunk xc = chunk::load(x + base + j);
        const chunk d = chunk::load(dy + base + j);
        const chunk gm = gamma ? chunk::load(gamma + j) : chunk::filled(1.f);
#pragma unroll
        for (int e = 0; e < W; ++e) {
          const float h = rm::layer_norm_normalize(xc.v[e], mu, inverse_std);
          sum_dy_xhat[i].v[e] += d.v[e] * h;
          sum_dy[i].v[e] += d.v[e];
          const float ge = d.v[e] * gm.v[e];
          s.first += ge;
          s.second += ge * h;
          xhat[i].v[e] = h;
          g[i].v[e] = ge;
        }
      }
    }
    if (dx) {  // uniform: a kernel argument
      s = gpu::group_reduce<kGroup>(s, rm::sum_pair{0.f, 0.f}, rm::sum_pair_merger{}, slots);
      const float mean_g = s.first / static_cast<float>(n);
      const float mean_g_xhat = s.second / static_cast<float>(n);
#pragma unroll
      for (int i = 0; i < row::chunks; ++i) {
        const int j = row::first_column(t, i);
        if (j < n) {
          chunk out;
#pragma unroll
          for (int e = 0; e < W; ++e)
            out.v[e] = rm::layer_norm_input_gradient(g[i].v[e], xhat[i].v[e], inverse_std, mean_g, mean_g_xhat);
          out.store(dx + base + j);
        }
      }
    }
  }

  if (!partial_gamma && !partial_beta) return;  // uniform
  if constexpr (kGroups > 1) {
    // The warps of the block summed different rows over the same columns:
    // warps 1.. hand theirs to warp 0, which adds them in warp order.
    __shared__ float handed[kGroups > 1 ? kGroups - 1 : 1][2][gpu::kPer][32];
    if (group > 0) {
#pragma unroll
      for (int i = 0; i < row::chunks; ++i)
#pragma unroll
        for (int e = 0; e < W; ++e) {
          handed[group - 1][0][i * W + e][t] = sum_dy_xhat[i].v[e];
          handed[group - 1][1][i * W + e][t] = sum_dy[i].v[e];
        }
    }
    __syncthreads();
    if (group > 0) return;
    for (int other = 0; other < kGroups - 1; ++other)
#pragma unroll
      for (int i = 0; i < row::chunks; ++i)
#pragma unroll
        for (int e = 0; e < W; ++e) {
          sum_dy_xhat[i].v[e] += handed[other][0][i * W + e][t];
          sum_dy[i].v[e] += handed[other][1][i * W + e][t];
        }
  }
  // Plain stores: the workspace is only promised 4-byte alignment.
  const std::size_t out = static_cast<std::size_t>(blockIdx.x) * static_cast<std::size_t>(n);
#pragma unroll
  for (int i = 0; i < row::chunks; ++i) {
    const int j = row::first_column(t, i);
    if (j < n) {
#pragma unroll
      for (int e = 0; e < W; ++e) {
        if (partial_gamma) partial_gamma[out + j + e] = sum_dy_xhat[i].v[e];
        if (partial_beta) partial_beta[out + j + e] = sum_dy[i].v[e];
      }
    }
  }
}

// Streamed rows, stage one of dgamma / dbeta: blocks of 32 columns x kLanes
// row lanes; block (c, b) sums rows [b * rows_per_part, ...) of its columns.
// (Kernels in this header are templates so that every translation unit may
// include it: template kernels link once.)
template <int kLanes>
__global__ void __launch_bounds__(32 * kLanes)
    backward_columns(const float* x, const float* mean, const float* rstd, const float* dy, float* partial_gamma,
                     float* partial_beta, int rows, int n, int rows_per_part) {
  __shared__ float lanes[2][kLanes][32];
  const int column = static_cast<int>(blockIdx.x) * 32 + static_cast<int>(threadIdx.x);
  const int first = static_cast<int>(blockIdx.y) * rows_per_part;
  const int last = rows - first < rows_per_part ? rows : first + rows_per_part;
  float sum_dy_xhat = 0.f, sum_dy = 0.f;
  if (column < n) {
    for (int r = first + static_cast<int>(threadIdx.y); r < last; r += kLanes) {
      const std::size_t at = static_cast<std::size_t>(r) * static_cast<std::size_t>(n) + column;
      const float d = dy[at];
      sum_dy_xhat += d * rm::layer_norm_normalize(x[at], mean[r], rstd[r]);
      sum_dy += d;
    }
  }
  lanes[0][threadIdx.y][threadIdx.x] = sum_dy_xhat;
  lanes[1][threadIdx.y][threadIdx.x] = sum_dy;
  __syncthreads();
  if (threadIdx.y == 0 && column < n) {
    float a = 0.f, b = 0.f;
#pragma unroll
    for (int k = 0; k < kLanes; ++k) {
      a += lanes[0][k][threadIdx.x];
      b += lanes[1][k][threadIdx.x];
    }
    const std::size_t out = static_cast<std::size_t>(blockIdx.y) * static_cast<std::size_t>(n) + column;
    if (partial_gamma) partial_gamma[out] = a;
    if (partial_beta) partial_beta[out] = b;
  }
}

// Streamed rows, dx: one row per 1024-thread block, x and dy read twice.
template <bool kVec>
__global__ void __launch_bounds__(1024)
    backward_rows_streamed(const float* x, const float* gamma, const float* mean, const float* rstd, const float* dy,
                           float* dx, int rows, int n) {
  using chunk = gpu::chunk<kVec>;
  constexpr int W = chunk::width;
  constexpr int kStride = 1024 * W;
  __shared__ rm::sum_pair slots[gpu::slot_count<0>];
  const int start = static_cast<int>(threadIdx.x) * W;
  for (int r = static_cast<int>(blockIdx.x); r < rows; r += static_cast<int>(gridDim.x)) {
    const std::size_t base = static_cast<std::size_t>(r) * static_cast<std::size_t>(n);
    const float mu = mean[r], inverse_std = rstd[r];
    rm::sum_pair s{0.f, 0.f};
    for (int j = start; j < n; j += kStride) {
      const chunk xc = chunk::load(x + base + j);
      const chunk d = chunk::load(dy + base + j);
      const chunk gm = gamma ? chunk::load(gamma + j) : chunk::filled(1.f);
#pragma unroll
      for (int e = 0; e < W; ++e) {
        const float ge = d.v[e] * gm.v[e];
        s.first += ge;
        s.second += ge * rm::layer_norm_normalize(xc.v[e], mu, inverse_std);
      }
    }
    s = gpu::group_reduce<0>(s, rm::sum_pair{0.f, 0.f}, rm::sum_pair_merger{}, slots);
    const float mean_g = s.first / static_cast<float>(n);
    const float mean_g_xhat = s.second / static_cast<float>(n);
    // Same columns per thread as above: each dy element is read by the thread that overwrites it.
    for (int j = start; j < n; j += kStride) {
      const chunk xc = chunk::load(x + base + j);
      const chunk d = chunk::load(dy + base + j);
      const chunk gm = gamma ? chunk::load(gamma + j) : chunk::filled(1.f);
      chunk out;
#pragma unroll
      for (int e = 0; e < W; ++e)
        out.v[e] = rm::layer_norm_input_gradient(d.v[e] * gm.v[e], rm::layer_norm_normalize(xc.v[e], mu, inverse_std),
                                                 inverse_std, mean_g, mean_g_xhat);
      out.store(dx + base + j);
    }
  }
}

// Stage two: column j of dgamma / dbeta = Σ_parts partial[part][j], summed in
// Sum (double), each of kLanes lanes taking every kLanes-th part, then the
// lanes in order.
template <class Sum, int kLanes>
__global__ void __launch_bounds__(32 * kLanes)
    reduce_partials(const float* partial_gamma, const float* partial_beta, float* dgamma, float* dbeta, int parts,
                    int n) {
  __shared__ Sum lanes[2][kLanes][32];
  const int column = static_cast<int>(blockIdx.x) * 32 + static_cast<int>(threadIdx.x);
  Sum a = 0, b = 0;
  if (column < n) {
    for (int p = static_cast<int>(threadIdx.y); p < parts; p += kLanes) {
      const std::size_t at = static_cast<std::size_t>(p) * static_cast<std::size_t>(n) + column;
      if (dgamma) a += partial_gamma[at];
      if (dbeta) b += partial_beta[at];
    }
  }
  lanes[0][threadIdx.y][threadIdx.x] = a;
  lanes[1][threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && column < n) {
    Sum ta = 0, tb = 0;
#pragma unroll
    for (int k = 0; k < kLanes; ++k) {
      ta += lanes[0][k][threadIdx.x];
      tb += lanes[1][k][threadIdx.x];
    }
    if (dgamma) dgamma[column] = static_cast<float>(ta);
    if (dbeta) dbeta[column] = static_cast<float>(tb);
  }
}

inline void check_shape(const char* what, int rows, int features) {
  if (rows < 0 || features <= 0)
    throw std::invalid_argument(std::string("typeflow: ") + what + ": needs rows >= 0 and features > 0, got rows " +
                                std::to_string(rows) + ", features " + std::to_string(features));
}

}  // namespace layer_norm_detail

std::size_t layer_norm_backward_workspace_bytes(int rows, int features) {
  const auto plan = layer_norm_detail::plan_backward(rows, features);
  return 2 * static_cast<std::size_t>(plan.parts) * static_cast<std::size_t>(features > 0 ? features : 0) *
         sizeof(float);
}

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                               int rows, int features, float epsilon, cudaStream_t stream) {
  namespace d = layer_norm_detail;
  namespace gpu = typeflow::row_math::gpu;
  d::check_shape("layer_norm_forward", rows, features);
  if (!(epsilon > 0.f))
    throw std::invalid_argument("typeflow: layer_norm_forward: epsilon must be positive (Keras's default is 1e-3)");
  if (rows == 0) return;
  const bool vec = features % 4 == 0 && gpu::all_aligned16(x, gamma, beta, y);
  gpu::dispatch_row(features, vec, [&]<int kGroup, bool kVec>() {
    if constexpr (kGroup == 0)
      d::forward_streamed<kVec><<<static_cast<unsigned>(rows), 1024, 0, stream>>>(x, gamma, beta, y, mean, rstd, rows,
                                                                                 features, epsilon);
    else
      d::forward_held<kGroup, kVec><<<gpu::row_blocks<kGroup>(rows), gpu::block_threads<kGroup>, 0, stream>>>(
          x, gamma, beta, y, mean, rstd, rows, features, epsilon);
    TYPEFLOW_CUDA_CHECK_LAUNCH();
  });
}

void layer_norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                                const float* dy, float* dx, float* dgamma, float* dbeta, int rows, int features,
                                cudaStream_t stream, float* partial_workspace) {
  namespace d = layer_norm_detail;
  namespace gpu = typeflow::row_math::gpu;
  d::check_shape("layer_norm_backward", rows, features);
  const bool params = dgamma != nullptr || dbeta != nullptr;
  if (rows == 0) {  // sums over no rows; the CPU layer writes zeros
    if (dgamma) TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(dgamma, 0, sizeof(float) * features, stream));
    if (dbeta) TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(dbeta, 0, sizeof(float) * features, stream));
    return;
  }
  if (params && partial_workspace == nullptr)
    throw std::invalid_argument(
        "typeflow: layer_norm_backward: dgamma/dbeta need a workspace of layer_norm_backward_workspace_bytes()");
  const auto plan = d::plan_backward(rows, features);
  float* partial_gamma = dgamma ? partial_workspace : nullptr;
  float* partial_beta = dbeta ? partial_workspace + static_cast<std::size_t>(plan.parts) * features : nullptr;
  const bool vec = features % 4 == 0 && gpu::all_aligned16(x, gamma, dy, dx);
  gpu::dispatch_row(features, vec, [&]<int kGroup, bool kVec>() {
    if constexpr (kGroup == 0) {
      // Column sums first: they read dy before dx (possibly dy's memory) is written.
      if (params) {
        const dim3 grid(static_cast<unsigned>((features + 31) / 32), static_cast<unsigned>(plan.parts));
        d::backward_columns<8><<<grid, dim3(32, 8), 0, stream>>>(x, mean, rstd, dy, partial_gamma, partial_beta, rows,
                                                            features, plan.rows_per_part);
        TYPEFLOW_CUDA_CHECK_LAUNCH();
      }
      if (dx) {
        d::backward_rows_streamed<kVec><<<static_cast<unsigned>(rows), 1024, 0, stream>>>(x, gamma, mean, rstd, dy, dx,
                                                                                         rows, features);
        TYPEFLOW_CUDA_CHECK_LAUNCH();
      }
    } else if (params || dx) {
      d::backward_held<kGroup, kVec><<<static_cast<unsigned>(plan.parts), gpu::block_threads<kGroup>, 0, stream>>>(
          x, gamma, mean, rstd, dy, dx, partial_gamma, partial_beta, rows, features, plan.rows_per_part);
      TYPEFLOW_CUDA_CHECK_LAUNCH();
    }
  });
  if (params) {
    d::reduce_partials<double, 16><<<static_cast<unsigned>((features + 31) / 32), dim3(32, 16), 0, stream>>>(
        partial_gamma, partial_beta, dgamma, dbeta, plan.parts, features);
    TYPEFLOW_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace typeflow::backend::cuda

// The kernels of backend/cuda/optimizer.hpp and its launchers' definitions.
// Compiled once by nvcc into typeflow::cuda's kernel library
// (src/cuda/optimizer.cu, which instantiates apply_update for every rule);
// to build without that library, compile that one source into your program
// instead. Include it nowhere else: the launchers are ordinary functions.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "typeflow/backend/cuda/optimizer.hpp"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/backend/cuda/vector_plan.hpp"
#include "typeflow/optimizers/device_update.hpp"

namespace typeflow::backend::cuda {

namespace detail {

__device__ __forceinline__ void warp_reduce(double& sum, int& bad) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    sum += __shfl_down_sync(0xffffffffu, sum, offset);
    bad |= __shfl_down_sync(0xffffffffu, bad, offset);
  }
}

// Sum and or over the block, in an order fixed by the block size; the result
// is valid in thread 0. Every thread must call it; shared may be reused after.
__device__ __forceinline__ void block_reduce(double& sum, int& bad, double* shared_sum, int* shared_bad) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  warp_reduce(sum, bad);
  if (lane == 0) shared_sum[warp] = sum, shared_bad[warp] = bad;
  __syncthreads();
  if (warp == 0) {
    sum = lane < warps ? shared_sum[lane] : 0.0;
    bad = lane < warps ? shared_bad[lane] : 0;
    warp_reduce(sum, bad);
  }
  __syncthreads();
}

__device__ __forceinline__ void accumulate(float& g, float inverse, bool rescale, double& sum, int& bad) {
  if (rescale) g *= inverse;
  bad |= !optimizer_device::updatable_bits(g);  // the NaN policy's bound, after unscaling
  sum += static_cast<double>(g) * static_cast<double>(g);
}

// Stage 1: per chunk, the squared norm (0 for padding and statistics) and
// whether a gradient was not finite; unscales in place. (The kernels without
// parameters are templates so that every translation unit may hold them.)
template <int = 0>
__global__ void statistics_chunks_kernel(float* grads, update_plan_view plan, const optimizer_device::step_state* state,
                                         float inverse_value, double* partial_sum, std::int32_t* partial_bad,
                                         bool vector) {
  __shared__ double shared_sum[32];
  __shared__ int shared_bad[32];
  const float inverse = state ? state->inverse_loss_scale : inverse_value;
  const bool rescale = inverse != 1.f;
  for (std::uint32_t c = blockIdx.x; c < plan.chunk_count; c += gridDim.x) {
    const optimizer_device::chunk ch = plan.chunks[c];
    float* g = grads + ch.begin;
    const vector_plan vp = vector ? split_from(ch.begin, ch.length, 4) : vector_plan{ch.length, 0, 0, 4};
    double sum = 0;
    int bad = 0;
    for (std::size_t v = threadIdx.x; v < vp.vectors; v += blockDim.x) {
      float4* p = reinterpret_cast<float4*>(g + vp.vector_index(v));
      float4 x = *p;
      accumulate(x.x, inverse, rescale, sum, bad);
      accumulate(x.y, inverse, rescale, sum, bad);
      accumulate(x.z, inverse, rescale, sum, bad);
      accumulate(x.w, inverse, rescale, sum, bad);
      if (rescale) *p = x;
    }
    for (std::size_t j = threadIdx.x; j < vp.scalars(); j += blockDim.x) {
      float& x = g[vp.scalar_index(j)];
      float value = x;
      accumulate(value, inverse, rescale, sum, bad);
      if (rescale) x = value;
    }
    block_reduce(sum, bad, shared_sum, shared_bad);
    if (threadIdx.x == 0) {
      const bool normed = ch.tensor >= 0 && plan.tensors[ch.tensor].normed;
      partial_sum[c] = normed ? sum : 0.0;
      partial_bad[c] = bad;
    }
  }
}

// Stage 2, one block: the global sum over all chunks, then per tensor one
// warp over that tensor's chunks. Fixed orders: the same bits every run.
template <int = 0>
__global__ void statistics_finish_kernel(update_plan_view plan, const double* partial_sum,
                                         const std::int32_t* partial_bad,
                                         optimizer_device::gradient_statistics* result, double* tensor_squared_norms,
                                         const float* loss) {
  __shared__ double shared_sum[32];
  __shared__ int shared_bad[32];
  double sum = 0;
  int bad = 0;
  for (std::uint32_t c = threadIdx.x; c < plan.chunk_count; c += blockDim.x) {
    sum += partial_sum[c];
    bad |= partial_bad[c];
  }
  block_reduce(sum, bad, shared_sum, shared_bad);
  if (threadIdx.x == 0) {
    result->squared_norm = sum;
    result->all_finite = bad == 0 && (!loss || isfinite(*loss));
    result->reserved = 0;
  }
  if (!tensor_squared_norms) return;
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (std::uint32_t t = warp; t < plan.tensor_count; t += warps) {
    const optimizer_device::tensor_entry e = plan.tensors[t];
    double s = 0;
    int unused = 0;
    for (std::uint32_t c = e.first_chunk + lane; c < e.first_chunk + e.chunk_count; c += 32) s += partial_sum[c];
    warp_reduce(s, unused);
    if (lane == 0) tensor_squared_norms[t] = s;
  }
}

// Where apply_update takes this step's values from.
template <class Rule>
struct step_source {
  const optimizer_device::step_state* state = nullptr;       // null: skip by skip_non_finite below
  const optimizer_device::step_table<Rule>* table = nullptr;  // null: `values`
  optimizer_rules::step_values<Rule> values{};
  std::int32_t skip_non_finite = 0;
};

__device__ __forceinline__ void to_array(const float4& v, float (&a)[4]) { a[0] = v.x, a[1] = v.y, a[2] = v.z, a[3] = v.w; }
__device__ __forceinline__ float4 from_array(const float (&a)[4]) { return make_float4(a[0], a[1], a[2], a[3]); }

template <class Rule>
__global__ void apply_update_kernel(float* weights, const float* grads, slot_pointers slots, update_plan_view plan,
                                    optimizer_rules::clip_options clip,
                                    const optimizer_device::gradient_statistics* statistics,
                                    const double* tensor_squared_norms, step_source<Rule> source, bool vector) {
  using optimizer_rules::clip_kind;
  constexpr int most = optimizer_rules::max_slots;
  const bool finite = statistics->all_finite != 0;
  optimizer_rules::step_values<Rule> values = source.values;
  if (source.state) {
    const optimizer_device::step_state state = *source.state;
    if (!optimizer_device::update_applies(state, finite)) return;
    if (source.table) {
      const optimizer_rules::step_values<Rule>* found = source.table->find(state.iterations + 1);
      if (!found) return;  // finish_step records the miss
      values = *found;
    }
  } else if (source.skip_non_finite && !finite) {
    return;
  }
  const int slot_count = values.rule.slots();
  const float global_factor =
      clip.kind == clip_kind::global_norm ? optimizer_rules::norm_clip_factor(statistics->squared_norm, clip.limit) : 1.f;
  for (std::uint32_t c = blockIdx.x; c < plan.chunk_count; c += gridDim.x) {
    const optimizer_device::chunk ch = plan.chunks[c];
    bool decays = false;
    float factor = clip.kind == clip_kind::norm ? 1.f : global_factor;  // padding: clipnorm leaves it alone
    if (ch.tensor >= 0) {
      const optimizer_device::tensor_entry t = plan.tensors[ch.tensor];
      decays = t.decays != 0 && values.decay_factor != 1.f;  // weight_decay 0: no decay, as on the CPU
      if (clip.kind == clip_kind::norm && t.normed)
        factor = optimizer_rules::norm_clip_factor(tensor_squared_norms[ch.tensor], clip.limit);
    }
    const vector_plan vp = vector ? split_from(ch.begin, ch.length, 4) : vector_plan{ch.length, 0, 0, 4};
    for (std::size_t v = threadIdx.x; v < vp.vectors; v += blockDim.x) {
      const std::size_t e = ch.begin + vp.vector_index(v);
      float w[4], g[4], s[most][4] = {};
      to_array(*reinterpret_cast<const float4*>(weights + e), w);
      to_array(*reinterpret_cast<const float4*>(grads + e), g);
#pragma unroll
      for (int k = 0; k < most; ++k)
        if (k < slot_count) to_array(*reinterpret_cast<const float4*>(slots.slot[k] + (e - plan.slot_origin)), s[k]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float element_slots[most];
#pragma unroll
        for (int k = 0; k < most; ++k) element_slots[k] = s[k][j];
        optimizer_rules::update_element(w[j], g[j], element_slots, values.rule, clip.kind, clip.limit, factor, decays,
                                        values.decay_factor);
#pragma unroll
        for (int k = 0; k < most; ++k) s[k][j] = element_slots[k];
      }
      *reinterpret_cast<float4*>(weights + e) = from_array(w);
#pragma unroll
      for (int k = 0; k < most; ++k)
        if (k < slot_count) *reinterpret_cast<float4*>(slots.slot[k] + (e - plan.slot_origin)) = from_array(s[k]);
    }
    for (std::size_t j = threadIdx.x; j < vp.scalars(); j += blockDim.x) {
      const std::size_t e = ch.begin + vp.scalar_index(j);
      float w = weights[e], s[most] = {};
#pragma unroll
      for (int k = 0; k < most; ++k)
        if (k < slot_count) s[k] = slots.slot[k][e - plan.slot_origin];
      optimizer_rules::update_element(w, grads[e], s, values.rule, clip.kind, clip.limit, factor, decays,
                                      values.decay_factor);
      weights[e] = w;
#pragma unroll
      for (int k = 0; k < most; ++k)
        if (k < slot_count) slots.slot[k][e - plan.slot_origin] = s[k];
    }
  }
}

// accumulate<K>: the step's decision (one thread), then the pass over the
// gradients and the accumulator.
template <int = 0>
__global__ void begin_accumulation_kernel(optimizer_device::step_state* state,
                                          const optimizer_device::gradient_statistics* statistics) {
  optimizer_device::step_state s = *state;
  optimizer_device::begin_accumulation(s, statistics->all_finite != 0);
  *state = s;
}
template <int = 0>
__global__ void accumulate_kernel(float* grads, float* sum, std::size_t n, const optimizer_device::step_state* state,
                                  float mean) {
  const std::int32_t mode = state->accumulate_mode;
  if (!(mode & optimizer_device::accumulate_add)) return;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    grads[i] = optimizer_device::accumulate_element(sum[i], grads[i], mode, mean);
}

// The EMA over the plan's tensors that are not statistics, a block per chunk
// (the CPU's update_moving_average, element by element).
template <int = 0>
__global__ void moving_average_kernel(float* weights, float* average, update_plan_view plan,
                                      const optimizer_device::step_state* state, float momentum,
                                      int overwrite_frequency) {
  const optimizer_device::step_state s = *state;
  if (!s.last_applied) return;  // a skipped step changes no weight, so no average
  const optimizer_rules::ema_step step = optimizer_rules::ema_step_for(s.iterations, momentum, overwrite_frequency);
  for (std::uint32_t c = blockIdx.x; c < plan.chunk_count; c += gridDim.x) {
    const optimizer_device::chunk ch = plan.chunks[c];
    if (ch.tensor < 0 || !plan.tensors[ch.tensor].normed) continue;  // padding, statistics
    for (std::uint32_t i = threadIdx.x; i < ch.length; i += blockDim.x) {
      const std::size_t e = ch.begin + i;
      const float a = optimizer_rules::moving_average(average[e - plan.slot_origin], weights[e], step.momentum);
      average[e - plan.slot_origin] = a;
      if (step.overwrite) weights[e] = a;
    }
  }
}

template <int = 0>
__global__ void finish_step_kernel(optimizer_device::step_state* state,
                                   const optimizer_device::gradient_statistics* statistics,
                                   const optimizer_device::step_table_header* table, optimizer_device::step_report* ring,
                                   std::uint32_t depth, std::uint64_t* counter) {
  optimizer_device::step_state s = *state;
  const bool finite = statistics->all_finite != 0;
  bool applied = optimizer_device::update_applies(s, finite);
  if (applied && table && table->index_of(s.iterations + 1) < 0) {
    applied = false;
    s.table_missed = 1;
  }
  optimizer_device::finish_step(s, finite, applied);
  *state = s;
  if (ring) {
    const std::uint64_t k = (*counter)++;
    ring[k % depth] = optimizer_device::make_report(s, *statistics);
    __threadfence_system();
  }
}

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

inline unsigned chunk_blocks(std::uint32_t chunks) {
  return chunks == 0 ? 1u : (chunks < optimizer_most_blocks ? chunks : optimizer_most_blocks);
}

template <class Rule>
void launch_apply_update(float* weights, const float* grads, slot_pointers slots, const device_update_plan& plan,
                         optimizer_rules::clip_options clip, const optimizer_device::gradient_statistics* statistics,
                         const double* tensor_squared_norms, const step_source<Rule>& source, cudaStream_t stream) {
  const update_plan_view& view = plan.view();
  if (view.chunk_count == 0) return;
  if (!weights || !grads || !statistics)
    throw std::invalid_argument("typeflow cuda apply_update: weights, gradients and statistics are required");
  if (clip.kind == optimizer_rules::clip_kind::norm && !tensor_squared_norms)
    throw std::invalid_argument("typeflow cuda apply_update: clipnorm needs the per-tensor squared norms "
                                "(pass tensor_squared_norms to gradient_statistics and here)");
  bool vector = aligned16(weights) && aligned16(grads);
  for (float* s : slots.slot) vector = vector && aligned16(s);  // null is aligned
  vector = vector && view.slot_origin % 4 == 0;                 // slot[e - origin] on the weights' float4s
  apply_update_kernel<Rule><<<chunk_blocks(view.chunk_count), optimizer_threads, 0, stream>>>(
      weights, grads, slots, view, clip, statistics, tensor_squared_norms, source, vector);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace detail

namespace detail {
inline void launch_gradient_statistics(float* grads, const device_update_plan& plan,
                                       const optimizer_device::step_state* state, float inverse_value,
                                       optimizer_device::gradient_statistics* result, double* tensor_squared_norms,
                                       void* workspace, std::size_t workspace_bytes, cudaStream_t stream,
                                       const float* loss) {
  const update_plan_view& view = plan.view();
  if (!result) throw std::invalid_argument("typeflow cuda gradient_statistics: result is required");
  if (workspace_bytes < plan.statistics_workspace_bytes() || (view.chunk_count && !workspace) ||
      reinterpret_cast<std::uintptr_t>(workspace) % alignof(double) != 0)
    throw std::invalid_argument("typeflow cuda gradient_statistics: the workspace needs " +
                                std::to_string(plan.statistics_workspace_bytes()) + " bytes, 8-byte aligned (got " +
                                std::to_string(workspace_bytes) + ")");
  auto* partial_sum = static_cast<double*>(workspace);
  auto* partial_bad = reinterpret_cast<std::int32_t*>(partial_sum + view.chunk_count);
  if (view.chunk_count) {
    statistics_chunks_kernel<><<<chunk_blocks(view.chunk_count), optimizer_threads, 0, stream>>>(
        grads, view, state, inverse_value, partial_sum, partial_bad, aligned16(grads));
    TYPEFLOW_CUDA_CHECK_LAUNCH();
  }
  statistics_finish_kernel<><<<1, statistics_finish_threads, 0, stream>>>(view, partial_sum, partial_bad, result,
                                                                         tensor_squared_norms, loss);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}
}  // namespace detail

void gradient_statistics(float* grads, const device_update_plan& plan, const optimizer_device::step_state* state,
                                optimizer_device::gradient_statistics* result, double* tensor_squared_norms,
                                void* workspace, std::size_t workspace_bytes, cudaStream_t stream, const float* loss) {
  detail::launch_gradient_statistics(grads, plan, state, 1.f, result, tensor_squared_norms, workspace, workspace_bytes,
                                     stream, loss);
}

void gradient_statistics(float* grads, const device_update_plan& plan, float inverse_loss_scale,
                                optimizer_device::gradient_statistics* result, double* tensor_squared_norms,
                                void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  detail::launch_gradient_statistics(grads, plan, nullptr, inverse_loss_scale, result, tensor_squared_norms, workspace,
                                     workspace_bytes, stream, nullptr);
}

template <class Rule>
void apply_update(float* weights, const float* grads, slot_pointers slots, const device_update_plan& plan,
                  optimizer_rules::clip_options clip, const optimizer_device::gradient_statistics* statistics,
                  const double* tensor_squared_norms, const optimizer_device::step_state* state,
                  const optimizer_device::step_table<Rule>* table, cudaStream_t stream) {
  if (!state || !table) throw std::invalid_argument("typeflow cuda apply_update: state and table are required");
  detail::step_source<Rule> source;
  source.state = state;
  source.table = table;
  detail::launch_apply_update(weights, grads, slots, plan, clip, statistics, tensor_squared_norms, source, stream);
}

template <class Rule>
void apply_update(float* weights, const float* grads, slot_pointers slots, const device_update_plan& plan,
                  optimizer_rules::clip_options clip, const optimizer_device::gradient_statistics* statistics,
                  const double* tensor_squared_norms, const optimizer_rules::step_values<Rule>& values,
                  bool skip_non_finite, cudaStream_t stream) {
  for (int k = 0; k < values.rule.slots(); ++k)
    if (!slots.slot[k]) throw std::invalid_argument("typeflow cuda apply_update: slot " + std::to_string(k) + " is null");
  detail::step_source<Rule> source;
  source.values = values;
  source.skip_non_finite = skip_non_finite;
  detail::launch_apply_update(weights, grads, slots, plan, clip, statistics, tensor_squared_norms, source, stream);
}

void finish_step(optimizer_device::step_state* state, const optimizer_device::gradient_statistics* statistics,
                 const optimizer_device::step_table_header* table, step_readback* readback, cudaStream_t stream) {
  detail::finish_step_kernel<><<<1, 1, 0, stream>>>(state, statistics, table,
                                                  readback ? readback->device_ring() : nullptr,
                                                  readback ? readback->depth() : 1u,
                                                  readback ? readback->device_counter() : nullptr);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

void accumulate_gradients(float* grads, float* accumulator, std::size_t floats, optimizer_device::step_state* state,
                          const optimizer_device::gradient_statistics* statistics, int micro_batches_per_update,
                          cudaStream_t stream) {
  if (micro_batches_per_update < 1)
    throw std::invalid_argument("typeflow cuda accumulate_gradients: K must be at least 1 (got " +
                                std::to_string(micro_batches_per_update) + ")");
  detail::begin_accumulation_kernel<><<<1, 1, 0, stream>>>(state, statistics);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
  if (floats == 0) return;
  const float mean = 1.f / static_cast<float>(micro_batches_per_update);  // the CPU's constexpr 1.f / K
  detail::accumulate_kernel<><<<blocks_for(floats, optimizer_threads, optimizer_most_blocks), optimizer_threads, 0,
                                stream>>>(grads, accumulator, floats, state, mean);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

void moving_average_update(float* weights, float* average, const device_update_plan& plan,
                           const optimizer_device::step_state* state, float momentum, int overwrite_frequency,
                           cudaStream_t stream) {
  const update_plan_view& view = plan.view();
  if (view.chunk_count == 0) return;
  detail::moving_average_kernel<><<<detail::chunk_blocks(view.chunk_count), optimizer_threads, 0, stream>>>(
      weights, average, view, state, momentum, overwrite_frequency);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace typeflow::backend::cuda

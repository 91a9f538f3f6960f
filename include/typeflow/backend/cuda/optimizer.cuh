// The optimizer step on the device, over the whole flat parameter region
// (weights, gradients and each slot one float array of the same layout):
//
//   gradient_statistics  one pass: unscale (loss scaling), all-finite flag,
//                        squared norms, global and per tensor; a two-stage
//                        reduction in double with a fixed order (no atomics),
//                        so the same gradients give the same bits every run
//   apply_update<Rule>   one kernel: skip (non-finite under loss scaling), or
//                        update_element (clip, decay, rule; element.hpp, the
//                        CPU's own functions) per element
//   finish_step          loss-scale state machine, update counter, and the
//                        step's report into pinned host memory
//
// Nothing here waits for the host or reads host values at run time beyond
// what sits in device memory, so a whole step can be captured in a graph and
// replayed. Per-step values (learning rate and the constants built from it,
// the update number, the loss scale) live in device memory: the loss scale
// and the update counter in a step_state the kernels advance themselves;
// the learning-rate constants in a step_table the host writes before each
// launch with set_device_value (elementwise.cuh). See device_update.hpp for
// why a table rather than one entry.
//
// Alignment: any float pointers; 16-byte-aligned bases (what cudaMalloc
// gives) take the float4 path. Aliasing: none between weights, gradients
// and slots.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/backend/cuda/vector_plan.hpp"
#include "typeflow/optimizers/device_update.hpp"

namespace typeflow::backend::cuda {

namespace optimizer_device = typeflow::optimizers::device;
namespace optimizer_rules = typeflow::optimizers;  // the rules and per-element functions both backends run

inline constexpr unsigned optimizer_threads = 256;  // per block of the chunk kernels
inline constexpr unsigned statistics_finish_threads = 1024;
inline constexpr unsigned optimizer_most_blocks = 132 * 8;  // H100/H200 SMs x resident blocks; chunks loop beyond

// The plan's tables on the device: copied once, read by every step.
struct update_plan_view {
  const optimizer_device::tensor_entry* tensors = nullptr;
  const optimizer_device::chunk* chunks = nullptr;
  std::uint32_t tensor_count = 0;
  std::uint32_t chunk_count = 0;
  std::uint64_t floats = 0;
};

// Bytes of the workspace gradient_statistics needs: a double and an int per chunk.
inline std::size_t statistics_workspace_bytes(std::uint32_t chunk_count) {
  return static_cast<std::size_t>(chunk_count) * (sizeof(double) + sizeof(std::int32_t));
}

class device_update_plan {
 public:
  // Copies the tables synchronously (once per model, before any capture).
  explicit device_update_plan(const optimizer_device::update_plan& plan)
      : tensors_(plan.tensors.size() * sizeof(optimizer_device::tensor_entry)),
        chunks_(plan.chunks.size() * sizeof(optimizer_device::chunk)) {
    if (!plan.tensors.empty())
      copy_to_device(tensors_.data(), plan.tensors.data(), tensors_.size());
    if (!plan.chunks.empty())
      copy_to_device(chunks_.data(), plan.chunks.data(), chunks_.size());
    view_ = {tensors_.data<optimizer_device::tensor_entry>(), chunks_.data<optimizer_device::chunk>(),
             static_cast<std::uint32_t>(plan.tensors.size()), static_cast<std::uint32_t>(plan.chunks.size()),
             plan.floats};
  }
  const update_plan_view& view() const noexcept { return view_; }
  std::uint32_t tensor_count() const noexcept { return view_.tensor_count; }
  std::size_t statistics_workspace_bytes() const noexcept { return cuda::statistics_workspace_bytes(view_.chunk_count); }

 private:
  device_buffer tensors_, chunks_;
  update_plan_view view_;
};

struct slot_pointers {
  float* slot[optimizers::max_slots] = {};  // the rule's slots in order; unused ones null
};

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
  bad |= !optimizer_device::is_finite_bits(g);
  if (rescale) g *= inverse;
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
                                         optimizer_device::gradient_statistics* result, double* tensor_squared_norms) {
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
    result->all_finite = bad == 0;
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
        if (k < slot_count) to_array(*reinterpret_cast<const float4*>(slots.slot[k] + e), s[k]);
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
        if (k < slot_count) *reinterpret_cast<float4*>(slots.slot[k] + e) = from_array(s[k]);
    }
    for (std::size_t j = threadIdx.x; j < vp.scalars(); j += blockDim.x) {
      const std::size_t e = ch.begin + vp.scalar_index(j);
      float w = weights[e], s[most] = {};
#pragma unroll
      for (int k = 0; k < most; ++k)
        if (k < slot_count) s[k] = slots.slot[k][e];
      optimizer_rules::update_element(w, grads[e], s, values.rule, clip.kind, clip.limit, factor, decays,
                                      values.decay_factor);
      weights[e] = w;
#pragma unroll
      for (int k = 0; k < most; ++k)
        if (k < slot_count) slots.slot[k][e] = s[k];
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
  apply_update_kernel<Rule><<<chunk_blocks(view.chunk_count), optimizer_threads, 0, stream>>>(
      weights, grads, slots, view, clip, statistics, tensor_squared_norms, source, vector);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace detail

namespace detail {
inline void launch_gradient_statistics(float* grads, const device_update_plan& plan,
                                       const optimizer_device::step_state* state, float inverse_value,
                                       optimizer_device::gradient_statistics* result, double* tensor_squared_norms,
                                       void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
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
                                                                         tensor_squared_norms);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}
}  // namespace detail

// Unscales grads in place by state->inverse_loss_scale, read when the kernel
// runs (state null: no scaling; nothing is written when the factor is 1),
// and writes `result` (device memory): the global squared norm over tensors
// that are not statistics, and whether every gradient was finite before
// unscaling. tensor_squared_norms (device, one double per plan tensor,
// nullable) gets each tensor's squared norm (0 for statistics); clipnorm
// needs it. workspace: device memory of plan.statistics_workspace_bytes()
// bytes, 8-byte aligned, not shared with a concurrent call.
inline void gradient_statistics(float* grads, const device_update_plan& plan, const optimizer_device::step_state* state,
                                optimizer_device::gradient_statistics* result, double* tensor_squared_norms,
                                void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  detail::launch_gradient_statistics(grads, plan, state, 1.f, result, tensor_squared_norms, workspace, workspace_bytes,
                                     stream);
}

// The same with the factor given now (eager use; a captured graph would
// replay this value).
inline void gradient_statistics(float* grads, const device_update_plan& plan, float inverse_loss_scale,
                                optimizer_device::gradient_statistics* result, double* tensor_squared_norms,
                                void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  detail::launch_gradient_statistics(grads, plan, nullptr, inverse_loss_scale, result, tensor_squared_norms, workspace,
                                     workspace_bytes, stream);
}

// The update, reading everything per-step from device memory (graph-safe):
// skipped when state->skip_non_finite and a gradient was not finite, or
// when `table` holds no values for update number state->iterations + 1;
// otherwise clip, decay and Rule on every element. Gradients are read, not
// written: they stay unscaled but unclipped. Slots: values.rule.slots() of
// them, in the rule's order (the CPU optimizer's slot order).
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

// The same with this step's values given by the host, as kernel arguments:
// for eager (uncaptured) use; a captured graph would replay these values.
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

// ---------------------------------------------------------------------------
// Reports back to the host: a ring of step_report in pinned memory that
// finish_step's kernel writes (slot = its own device counter % depth, so each
// replay of a captured graph writes the next slot), and one event per slot.
//
// Per step, on the host: make_room(); enqueue the step (or launch its
// graph); mark(stream). Read with poll() (never waits) or wait(). With
// loss scaling the host learns whether step k was applied only from its
// report, so the step table for the next step covers
// first_possible_iteration() .. + possible_iterations() - 1.
class step_readback {
 public:
  explicit step_readback(unsigned depth = 8)
      : depth_(depth), ring_(depth * sizeof(optimizer_device::step_report)), counter_(sizeof(std::uint64_t)) {
    if (depth == 0 || depth >= static_cast<unsigned>(optimizer_device::step_table_capacity))
      throw std::invalid_argument("step_readback: depth must lie in [1, " +
                                  std::to_string(optimizer_device::step_table_capacity - 1) + "]");
    TYPEFLOW_CUDA_CHECK(cudaMemset(counter_.data(), 0, sizeof(std::uint64_t)));
    // Pinned memory is mapped into the device's address space (unified
    // addressing, every 64-bit platform): the kernel writes it directly.
    if (cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_ring_), ring_.data(), 0) != cudaSuccess) {
      (void)cudaGetLastError();
      device_ring_ = ring_.data<optimizer_device::step_report>();  // under unified addressing, the same pointer
    }
    events_.reserve(depth);
    for (unsigned k = 0; k < depth; ++k) events_.emplace_back();
  }

  unsigned depth() const noexcept { return depth_; }
  optimizer_device::step_report* device_ring() const noexcept { return device_ring_; }
  std::uint64_t* device_counter() const noexcept { return counter_.data<std::uint64_t>(); }
  // Steps marked whose reports have not been taken off the ring yet.
  std::uint64_t pending() const noexcept { return marked_ - taken_; }
  // Reports not yet returned by poll() or wait(), finished or not.
  bool has_unread() const noexcept { return !ready_.empty() || pending() > 0; }

  // Before enqueuing a step: when the ring is full, waits for the oldest
  // report and keeps it for poll()/wait(), so the new step cannot overwrite it.
  void make_room() {
    if (pending() == depth_) {
      events_[taken_ % depth_].synchronize();
      take();
    }
  }
  // After enqueuing one step on `stream`.
  void mark(cudaStream_t stream) {
    if (pending() == depth_) throw std::logic_error("step_readback: mark() without make_room() on a full ring");
    events_[marked_ % depth_].record(stream);
    ++marked_;
  }
  // The oldest unread report, if its step has finished; never waits.
  std::optional<optimizer_device::step_report> poll() {
    if (ready_.empty() && pending() > 0) {
      const cudaError_t code = cudaEventQuery(events_[taken_ % depth_].get());
      if (code == cudaSuccess)
        take();
      else if (code == cudaErrorNotReady)
        (void)cudaGetLastError();  // not an error; do not let a later launch check see it
      else
        TYPEFLOW_CUDA_CHECK(code);
    }
    if (ready_.empty()) return std::nullopt;
    const optimizer_device::step_report r = ready_.front();
    ready_.pop_front();
    return r;
  }
  // The oldest unread report, waiting for its step.
  optimizer_device::step_report wait() {
    if (ready_.empty()) {
      if (pending() == 0) throw std::logic_error("step_readback: wait() with nothing unread");
      events_[taken_ % depth_].synchronize();
      take();
    }
    const optimizer_device::step_report r = ready_.front();
    ready_.pop_front();
    return r;
  }

  // For step_table_for: the update number the next step has if no pending
  // step was skipped, and how many numbers it may have (one per pending step
  // that may be skipped, plus one).
  std::int64_t first_possible_iteration() const noexcept { return known_iterations_ + 1; }
  int possible_iterations() const noexcept { return static_cast<int>(pending()) + 1; }

 private:
  void take() {
    const optimizer_device::step_report r = ring_.data<optimizer_device::step_report>()[taken_ % depth_];
    known_iterations_ = r.iterations;
    ready_.push_back(r);
    ++taken_;
  }

  unsigned depth_;
  pinned_buffer ring_;
  device_buffer counter_;
  optimizer_device::step_report* device_ring_ = nullptr;
  std::vector<event> events_;
  std::deque<optimizer_device::step_report> ready_;
  std::uint64_t marked_ = 0, taken_ = 0;
  std::int64_t known_iterations_ = 0;
};

// After apply_update: advances *state (loss scale as loss_scale::after_step,
// iterations when the update applied) and, with a readback, writes the
// step's report to its ring. table: the step_table apply_update read
// (&table->header), or null when the values came by argument.
inline void finish_step(optimizer_device::step_state* state, const optimizer_device::gradient_statistics* statistics,
                        const optimizer_device::step_table_header* table, step_readback* readback,
                        cudaStream_t stream) {
  detail::finish_step_kernel<><<<1, 1, 0, stream>>>(state, statistics, table,
                                                  readback ? readback->device_ring() : nullptr,
                                                  readback ? readback->depth() : 1u,
                                                  readback ? readback->device_counter() : nullptr);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace typeflow::backend::cuda

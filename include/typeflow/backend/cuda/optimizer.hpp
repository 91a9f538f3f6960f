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
//   accumulate_gradients   accumulate<K>'s accumulator, before the update
//   moving_average_update  the optimizer EMA, when the step applied
//
// Nothing here waits for the host or reads host values at run time beyond
// what sits in device memory, so a whole step can be captured in a graph and
// replayed. Per-step values (learning rate and the constants built from it,
// the update number, the loss scale) live in device memory: the loss scale
// and the update counter in a step_state the kernels advance themselves;
// the learning-rate constants in a step_table the host writes before each
// launch with set_device_value (elementwise.hpp). See device_update.hpp for
// why a table rather than one entry.
//
// Alignment: any float pointers; 16-byte-aligned bases (what cudaMalloc
// gives) take the float4 path. Aliasing: none between weights, gradients
// and slots.
#pragma once

// Declared here for any compiler; the kernels and the launchers' definitions
// are in kernels/optimizer.cuh, which nvcc compiles once into typeflow::cuda's
// kernel library (src/cuda/optimizer.cu), for the rules of adam, adamw,
// rmsprop, sgd and lion.

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
  std::uint64_t slot_origin = 0;  // the slots' element i is slot[i - slot_origin] (update_plan's)
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
             plan.floats, plan.slot_origin};
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

// Unscales grads in place by state->inverse_loss_scale, read when the kernel
// runs (state null: no scaling; nothing is written when the factor is 1),
// and writes `result` (device memory): the global squared norm over tensors
// that are not statistics, and whether every gradient was finite before
// unscaling. tensor_squared_norms (device, one double per plan tensor,
// nullable) gets each tensor's squared norm (0 for statistics); clipnorm
// needs it. workspace: device memory of plan.statistics_workspace_bytes()
// bytes, 8-byte aligned, not shared with a concurrent call. loss (device
// memory, nullable): the step's mean loss; a non-finite one makes the step
// not finite too, so that the update is refused as the CPU refuses it.
void gradient_statistics(float* grads, const device_update_plan& plan, const optimizer_device::step_state* state,
                         optimizer_device::gradient_statistics* result, double* tensor_squared_norms, void* workspace,
                         std::size_t workspace_bytes, cudaStream_t stream, const float* loss = nullptr);

// The same with the factor given now (eager use; a captured graph would
// replay this value).
void gradient_statistics(float* grads, const device_update_plan& plan, float inverse_loss_scale,
                         optimizer_device::gradient_statistics* result, double* tensor_squared_norms, void* workspace,
                         std::size_t workspace_bytes, cudaStream_t stream);

// The update, reading everything per-step from device memory (graph-safe):
// skipped when state->skip_non_finite and a gradient was not finite, or
// when `table` holds no values for update number state->iterations + 1;
// otherwise clip, decay and Rule on every element. Gradients are read, not
// written: they stay unscaled but unclipped. Slots: values.rule.slots() of
// them, in the rule's order (the CPU optimizer's slot order), each holding
// the plan's range: element i at slot[i - slot_origin] (update_plan's).
template <class Rule>
void apply_update(float* weights, const float* grads, slot_pointers slots, const device_update_plan& plan,
                  optimizer_rules::clip_options clip, const optimizer_device::gradient_statistics* statistics,
                  const double* tensor_squared_norms, const optimizer_device::step_state* state,
                  const optimizer_device::step_table<Rule>* table, cudaStream_t stream);

// The same with this step's values given by the host, as kernel arguments:
// for eager (uncaptured) use; a captured graph would replay these values.
template <class Rule>
void apply_update(float* weights, const float* grads, slot_pointers slots, const device_update_plan& plan,
                  optimizer_rules::clip_options clip, const optimizer_device::gradient_statistics* statistics,
                  const double* tensor_squared_norms, const optimizer_rules::step_values<Rule>& values,
                  bool skip_non_finite, cudaStream_t stream);

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
void finish_step(optimizer_device::step_state* state, const optimizer_device::gradient_statistics* statistics,
                 const optimizer_device::step_table_header* table, step_readback* readback, cudaStream_t stream);

// accumulate<K> (optimizers/accumulate.hpp), after gradient_statistics and
// before apply_update: begin_accumulation on *state (from the statistics'
// all_finite), then over [0, floats) the accumulator takes the gradients
// and, when the update completes, the gradients become the accumulator's
// mean (accumulate_element). apply_update and finish_step then apply only
// on the step that completes an update (update_applies). Graph-safe.
void accumulate_gradients(float* grads, float* accumulator, std::size_t floats, optimizer_device::step_state* state,
                          const optimizer_device::gradient_statistics* statistics, int micro_batches_per_update,
                          cudaStream_t stream);

// Keras's optimizer EMA (optimizers/ema.hpp), after finish_step: when the
// step applied its update (state->last_applied), average = moving_average(
// average, weights, m) over the plan's tensors that are not statistics, m
// = 0 at update 1 (the average holding the plan's range, as a slot), and
// the weights become the average every
// overwrite_frequency updates (0: never). Graph-safe: the update number
// comes from *state when the kernel runs.
void moving_average_update(float* weights, float* average, const device_update_plan& plan,
                           const optimizer_device::step_state* state, float momentum, int overwrite_frequency,
                           cudaStream_t stream);

}  // namespace typeflow::backend::cuda

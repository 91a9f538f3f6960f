// The optimizer a CUDA model was compiled with, on one device: the update
// plan and the step state in device memory, and the three calls a training
// step records into its graph (optimizer.hpp): gradient statistics, the
// multi-tensor update, and finish_step. Before each launch the host writes
// the step's learning-rate constants (step table) into device memory, from
// the optimizer compile() keeps (training_state's, referred to here, never
// copied: model::set_learning_rate changes the one both devices read). With
// use_ema the step ends with the moving average (optimizer.hpp's
// moving_average_update).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "typeflow/backend/cuda/elementwise.hpp"
#include "typeflow/backend/cuda/optimizer.hpp"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/optimizers/device_update.hpp"
#include "typeflow/optimizers/optimizers.hpp"

namespace typeflow::backend::cuda {

// What one pass of an update measured (device memory): zero<k>'s shards
// each measure their range, and the engine sums the squared norms (global
// and per tensor) and takes the least all_finite over the shards before the
// next pass, which then reads the whole region's.
struct measured_statistics {
  optimizers::device::gradient_statistics* statistics = nullptr;
  double* tensor_squared_norms = nullptr;
  std::size_t tensors = 0;
};

class device_optimizer_base {
 public:
  virtual ~device_optimizer_base() = default;
  // The step state (update counter, loss scale) in device memory, and
  // its replacement (set_loss_scale, which keeps the update counter).
  virtual optimizers::device::step_state* state() = 0;
  virtual void reset_state(const optimizers::device::step_state& s) = 0;
  // Host side, before launching the step whose update number is `iteration`:
  // enqueues the write of its constants on `stream` (outside any capture).
  virtual void prepare(std::int64_t iteration, cudaStream_t stream) = 0;
  // Recorded into the step, pass by pass on one stream: the gradients'
  // statistics; with accumulate<K> the accumulation and the mean's
  // statistics; then the update of the weights and slots in `arena` and the
  // step state's advance. Each pass but the last returns what it measured
  // (zero<k>'s engine sums it over the shards before the next). loss (device
  // memory, nullable): the step's mean loss, which refuses the update when
  // it is not finite (without loss scaling, as the CPU does).
  virtual int update_passes() const = 0;
  virtual measured_statistics record_pass(int pass, std::byte* arena, std::size_t gradients_offset,
                                          const std::array<std::size_t, 8>& slot_offsets, cudaStream_t stream,
                                          const float* loss) = 0;
  // Every pass, for an optimizer of the whole region (nothing to sum).
  void record_update(std::byte* arena, std::size_t gradients_offset, const std::array<std::size_t, 8>& slot_offsets,
                     cudaStream_t stream, const float* loss) {
    for (int pass = 0; pass < update_passes(); ++pass)
      (void)record_pass(pass, arena, gradients_offset, slot_offsets, stream, loss);
  }
};

// Optimizer: a rule optimizer, which must outlive this (training_state's);
// Accumulate: K of accumulate<K>(optimizer) (the accumulator is the slot
// after the rule's), 0 for none. With a range (zero<k>'s shard) it updates
// that range of the region alone, its slots (accumulator and average too)
// holding that range.
template <class Optimizer, int Accumulate = 0>
class device_optimizer final : public device_optimizer_base {
  using rule = optimizers::rule_of<Optimizer>;
  using table_type = optimizers::device::step_table<rule>;
  static constexpr bool accumulates = Accumulate > 0;

 public:
  device_optimizer(const Optimizer& o, std::span<const optimizers::parameter_tensor> tensors, std::size_t floats,
                   const optimizers::device::step_state& initial, optimizers::device::plan_range range = {})
      : optimizer_(o),
        plan_(optimizers::device::make_update_plan(tensors, floats, o.weight_decay_applies_to,
                                                   optimizers::device::default_chunk_floats, range)),
        begin_(range.begin),
        end_(std::min(range.end, floats)),
        workspace_(plan_.statistics_workspace_bytes()),
        statistics_(sizeof(optimizers::device::gradient_statistics)),
        mean_statistics_(accumulates ? sizeof(optimizers::device::gradient_statistics) : 0),
        tensor_norms_(sizeof(double) * (plan_.tensor_count() ? plan_.tensor_count() : 1)),
        state_(sizeof(optimizers::device::step_state)),
        table_(sizeof(table_type)),
        clip_(optimizers::clip_options_of(o)),
        ema_(optimizers::ema_options_of(o)),
        slots_(o.slot_count()) {
    if (slots_ + (accumulates ? 1 : 0) + (ema_.use_ema ? 1 : 0) > 8)  // the engine's slot_offsets
      throw std::invalid_argument(std::string("compile on tf::cuda: ") + std::string(Optimizer::name) +
                                  " with its accumulator and use_ema keeps more than 8 slots");
    if (slots_ > optimizers::max_slots)
      throw std::invalid_argument(std::string("compile on tf::cuda: ") + std::string(Optimizer::name) + " keeps " +
                                  std::to_string(slots_) + " slots per weight; the update kernel takes at most " +
                                  std::to_string(optimizers::max_slots));
    reset_state(initial);
  }

  optimizers::device::step_state* state() override { return state_.template data<optimizers::device::step_state>(); }
  void reset_state(const optimizers::device::step_state& s) override {
    optimizers::device::step_state own = s;
    own.micro_batches_per_update = Accumulate;
    copy_to_device(state_.data(), &own, sizeof own);
  }

  void prepare(std::int64_t iteration, cudaStream_t stream) override {
    set_device_value(table_.template data<table_type>(), optimizers::device::step_table_for(optimizer_, iteration, 1),
                     stream);
  }

  int update_passes() const override { return accumulates ? 3 : 2; }

  measured_statistics record_pass(int pass, std::byte* arena, std::size_t gradients_offset,
                                  const std::array<std::size_t, 8>& slot_offsets, cudaStream_t stream,
                                  const float* loss) override {
    float* weights = reinterpret_cast<float*>(arena);
    float* grads = reinterpret_cast<float*>(arena + gradients_offset);
    auto* statistics = statistics_.template data<optimizers::device::gradient_statistics>();
    auto* mean = mean_statistics_.template data<optimizers::device::gradient_statistics>();
    auto* state = state_.template data<optimizers::device::step_state>();
    double* norms = tensor_norms_.template data<double>();
    const std::size_t tensors = plan_.tensor_count();
    if (pass == 0) {
      // Unscaled, checked (all_finite) and, without accumulation, measured for clipping.
      gradient_statistics(grads, plan_, state, statistics, norms, workspace_.data(), workspace_.size(), stream, loss);
      return {statistics, norms, tensors};
    }
    if (accumulates && pass == 1) {
      // The accumulator takes the micro-batch; on the K-th the gradients
      // become the mean, which the clipping measures again (as the CPU
      // clips the mean); the loss scale still follows the micro-batch.
      accumulate_gradients(grads + begin_, slot_at(arena, slot_offsets, slots_), end_ - begin_, state, statistics,
                           Accumulate, stream);
      gradient_statistics(grads, plan_, 1.f, mean, norms, workspace_.data(), workspace_.size(), stream);
      return {mean, norms, tensors};
    }
    slot_pointers slots;
    for (int s = 0; s < slots_ && s < optimizers::max_slots; ++s) slots.slot[s] = slot_at(arena, slot_offsets, s);
    apply_update<rule>(weights, grads, slots, plan_, clip_, accumulates ? mean : statistics, norms, state,
                       table_.template data<table_type>(), stream);
    finish_step(state, statistics, &table_.template data<table_type>()->header, nullptr, stream);
    // use_ema: the average is the slot after the optimizer's own (compiled.hpp's ema_slot()).
    if (ema_.use_ema)
      moving_average_update(weights, slot_at(arena, slot_offsets, slots_ + (accumulates ? 1 : 0)), plan_, state,
                            ema_.ema_momentum, ema_.ema_overwrite_frequency.value_or(0), stream);
    return {};
  }

 private:
  static float* slot_at(std::byte* arena, const std::array<std::size_t, 8>& slot_offsets, int s) {
    return reinterpret_cast<float*>(arena + slot_offsets[static_cast<std::size_t>(s)]);
  }

  const Optimizer& optimizer_;
  device_update_plan plan_;
  std::size_t begin_, end_;  // the range updated: the region, or zero<k>'s shard
  device_buffer workspace_, statistics_, mean_statistics_, tensor_norms_, state_, table_;
  optimizers::clip_options clip_;
  optimizers::ema_options ema_;
  int slots_;
};

template <int K, class Inner>
std::unique_ptr<device_optimizer_base> make_accumulating(const Inner& inner,
                                                         std::span<const optimizers::parameter_tensor> tensors,
                                                         std::size_t floats,
                                                         const optimizers::device::step_state& initial,
                                                         optimizers::device::plan_range range) {
  static_assert(optimizers::rule_optimizer<Inner>,
                "compile on tf::cuda: accumulate<K>(optimizer) needs an optimizer with a per-element rule "
                "(see optimizers/element.hpp)");
  return std::make_unique<device_optimizer<Inner, K>>(inner, tensors, floats, initial, range);
}

// Any optimizer that gives its per-element rule (optimizers::rule_optimizer:
// rule(iteration), the learning rate, weight decay and clipping options):
// the kernel runs that rule, so an optimizer needs no code of its own here;
// accumulate<K>(optimizer) runs the optimizer's rule after the accumulator.
// range: the whole region, or zero<k>'s shard of it.
template <class Optimizer>
std::unique_ptr<device_optimizer_base> make_device_optimizer(const Optimizer& o,
                                                             std::span<const optimizers::parameter_tensor> tensors,
                                                             std::size_t floats,
                                                             const optimizers::device::step_state& initial,
                                                             optimizers::device::plan_range range = {}) {
  if constexpr (requires { o.inner; Optimizer::steps; }) {  // accumulate<K>
    return make_accumulating<Optimizer::steps>(o.inner, tensors, floats, initial, range);
  } else if constexpr (!optimizers::rule_optimizer<Optimizer>) {
    static_assert(optimizers::rule_optimizer<Optimizer>,
                  "compile on tf::cuda: the optimizer runs as one multi-tensor kernel over its per-element rule, and "
                  "this one gives no rule(iteration) (see optimizers/element.hpp)");
    return nullptr;
  } else {
    return std::make_unique<device_optimizer<Optimizer>>(o, tensors, floats, initial, range);
  }
}

}  // namespace typeflow::backend::cuda

// engine<Net, Policy, Strategy, Device>: what model<> hands to a device.
//
// model<Net, Policy, Strategy, Device> (train/model.hpp) is written once: the
// checks, compile, fit's loop, evaluate, predict, generate, the weights files
// and the parameter views. What depends on where the step runs is the
// engine's, one per device:
//   cpu   train/cpu_engine.hpp   one host arena, oneDNN; mirrored<N> through
//                                train/cpu_replicas.hpp, multi_worker
//                                through the strategy's MPI collectives;
//   cuda  train/cuda_engine.hpp  one cudaMalloc arena per GPU, each step a
//                                CUDA graph; mirrored<N> and multi_worker
//                                through distribute/cuda_replicas.hpp (NCCL)
//                                (typeflow/cuda.hpp, any C++20 compiler).
//
// An engine is constructed from the model's training_state (which it keeps
// a reference to), the seed and the device's own arguments, and provides:
//   is_chief()                         whether this process prints and writes;
//   check_compile(optimizer, loss)     refuses what the device cannot run, before compile changes anything;
//   compiled(optimizer)                lays the optimizer's state out, after training_state::compile;
//                                      `optimizer` is training_state's own, which the engine may keep
//                                      a reference to (set_learning_rate changes it there);
//   steps<Batch>()                     fit_loop's steps: training_steps (train/training_step.hpp, the
//                                      step's sequence, written once) over the device's step_ops;
//   evaluate(data), predict(data)      inference over a dataset;
//   generate(prompt, n, options)       decoding, where the device has it;
//   parameters(), writable_parameters(), gradients()
//                                      the parameter and gradient regions on the host, up to date;
//   replica_parameter_region(r), arena_bytes(r)
//   set_loss_scale(o), loss_scale(), skipped_steps()
//   counters(), restore(counters), slot_values(s), set_slot_values(s, values)
//                                      what a checkpoint keeps (train/checkpointing.hpp)
#pragma once

#include <cstdint>

#include "typeflow/precision/loss_scale.hpp"

namespace typeflow {

// What a checkpoint keeps of an engine beside the parameter and slot
// regions: the model's seed (each replica's and worker's dropout seed is
// drawn from it), the dropout step counter, and the loss-scale state.
struct engine_counters {
  std::uint64_t seed = 0;
  std::uint64_t dropout_step = 0;
  precision::loss_scale_state loss_scale{};
};

template <class Net, class Policy, class Strategy, class Device>
class engine {
  static_assert(sizeof(Device) == 0,
                "model<Net, Policy, Strategy, cuda> is defined in typeflow/cuda.hpp: include it (from any "
                "translation unit) and link typeflow::cuda");
};

}  // namespace typeflow

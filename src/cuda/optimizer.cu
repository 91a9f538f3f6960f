// backend/cuda/optimizer.hpp's kernels and launchers, compiled once
// (typeflow::cuda's kernel library), with apply_update for the rule of every
// optimizer that runs on the device: adam and adamw, rmsprop, sgd, lion.
#include "typeflow/backend/cuda/kernels/optimizer.cuh"
#include "typeflow/optimizers/adam.hpp"
#include "typeflow/optimizers/lion.hpp"
#include "typeflow/optimizers/rmsprop.hpp"
#include "typeflow/optimizers/sgd.hpp"

namespace typeflow::backend::cuda {

#define TYPEFLOW_CUDA_APPLY_UPDATE(Rule)                                                                          \
  template void apply_update<Rule>(float*, const float*, slot_pointers, const device_update_plan&,               \
                                   optimizer_rules::clip_options, const optimizer_device::gradient_statistics*, \
                                   const double*, const optimizer_device::step_state*,                          \
                                   const optimizer_device::step_table<Rule>*, cudaStream_t);                    \
  template void apply_update<Rule>(float*, const float*, slot_pointers, const device_update_plan&,               \
                                   optimizer_rules::clip_options, const optimizer_device::gradient_statistics*, \
                                   const double*, const optimizer_rules::step_values<Rule>&, bool, cudaStream_t);
TYPEFLOW_CUDA_APPLY_UPDATE(optimizers::adam_rule<>)
TYPEFLOW_CUDA_APPLY_UPDATE(optimizers::rmsprop_rule<>)
TYPEFLOW_CUDA_APPLY_UPDATE(optimizers::sgd_rule<>)
TYPEFLOW_CUDA_APPLY_UPDATE(optimizers::lion_rule)
#undef TYPEFLOW_CUDA_APPLY_UPDATE

}  // namespace typeflow::backend::cuda

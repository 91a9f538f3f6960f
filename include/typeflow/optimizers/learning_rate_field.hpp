// The learning rate that Keras's callbacks set (reduce_lr_on_plateau,
// learning_rate_scheduler: model.optimizer.learning_rate = x): an
// optimizer's `learning_rate` field, found through wrappers such as
// accumulate<K> (their `inner`). Both devices read the field: the CPU's
// update each step, the CUDA optimizer's copy when it is told
// (device_optimizer_base::set_learning_rate).
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>

#include "typeflow/schedules/schedules.hpp"

namespace typeflow::optimizers {

// The optimizer's learning_rate field, or nullptr when it has none.
template <class O>
schedules::learning_rate* learning_rate_field(O& o) {
  if constexpr (requires { o.inner; })
    return learning_rate_field(o.inner);
  else if constexpr (requires { { o.learning_rate } -> std::same_as<schedules::learning_rate&>; })
    return &o.learning_rate;
  else
    return nullptr;
}

// Sets the field to a constant rate. Refused, as Keras refuses it, when the
// optimizer was given a schedule (its rate is not a variable) or has no field.
template <class O>
void set_constant_learning_rate(O& o, std::string_view name, double rate) {
  schedules::learning_rate* field = learning_rate_field(o);
  if (!field)
    throw std::logic_error("set_learning_rate: the optimizer " + std::string(name) +
                           " has no learning_rate field to set");
  if (!field->is_constant())
    throw std::logic_error("set_learning_rate: this optimizer (" + std::string(name) + ") was compiled with the " +
                           std::string(field->name()) +
                           " schedule as its learning rate, so its learning rate is not settable; give it a "
                           "constant learning_rate to use reduce_lr_on_plateau or learning_rate_scheduler");
  *field = schedules::learning_rate(rate);  // refuses a negative or non-finite rate
}

}  // namespace typeflow::optimizers

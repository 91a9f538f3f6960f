// The optimizers, with Keras's rules and defaults. Each is an aggregate of
// Keras's fields (learning_rate takes a float or any schedule; at most one of
// clipnorm, clipvalue and global_clipnorm), with validate(), slot_count(),
// rule(iteration) (its per-element step, element.hpp) and
// update(update_arguments), which is apply_update(*this, arguments): the one
// CPU update (update.hpp). The CUDA backend's multi-tensor kernel runs the
// same rule (optimizers/device_update.hpp): an optimizer is one file here
// (fields, validate(), slot_count(), rule() and that one-line update()) and,
// for the GPU, one line in src/cuda/optimizer.cu, the kernel library's list
// of the rules it instantiates.
#pragma once

#include <concepts>
#include <string_view>

#include "typeflow/optimizers/accumulate.hpp"
#include "typeflow/optimizers/adam.hpp"
#include "typeflow/optimizers/ema.hpp"
#include "typeflow/optimizers/learning_rate_field.hpp"
#include "typeflow/optimizers/lion.hpp"
#include "typeflow/optimizers/rmsprop.hpp"
#include "typeflow/optimizers/sgd.hpp"
#include "typeflow/optimizers/sharded_update.hpp"
#include "typeflow/optimizers/update.hpp"

namespace typeflow::optimizers {

template <class O>
concept optimizer = requires(const O& o, const update_arguments& a) {
  { O::name } -> std::convertible_to<std::string_view>;
  { o.slot_count() } -> std::convertible_to<int>;
  o.validate();
  { o.learning_rate(std::int64_t{0}) } -> std::convertible_to<double>;
} && (requires(const O& o, const update_arguments& a) { o.update(a); } ||
      requires(O& o, const update_arguments& a) { { o.accumulate_and_update(a) } -> std::convertible_to<bool>; });

}  // namespace typeflow::optimizers

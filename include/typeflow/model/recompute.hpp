// recompute<Layers...>: gradient checkpointing.
//
// The layers run as one block whose inner activations are not kept for the
// backward pass: they live in the shared scratch region, and backward runs
// the block's forward again before its backward. The block's input (the
// previous layer's output) is all that is kept. Memory: the plan's
// kept_activation_bytes drop by the block's inner activations and
// workspaces; the step costs one more forward of the block.
//
// The recomputed forward draws the same dropout masks (they are keyed on the
// seed, the step and the layer). A batch_norm inside would update its moving
// statistics twice per step, so keep normalisation by batch statistics out
// of recomputed blocks (layer_norm is fine).
#pragma once

#include <string>

#include "typeflow/model/chain.hpp"
#include "typeflow/model/chain_executor.hpp"

namespace typeflow {

template <class... Layers>
struct recompute {
  static std::string type_name() { return "recompute<" + detail::type_names<Layers...>() + ">"; }

  template <class In, class Context>
  struct bind : chain_binding<Context, In, true, Layers...> {};
};

}  // namespace typeflow

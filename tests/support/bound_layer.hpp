// A layer bound on its own, for tests that drive its executor on buffers of
// their own: the bound type remembers its spec, through which the executor is
// found (tf::executor<typename Layer::spec, Layer, Batch, tf::cpu>).
#pragma once

#include "typeflow/contract/layer.hpp"

namespace typeflow::testing {

template <class Spec, class In, class Context>
struct bound_layer : Spec::template bind<In, Context> {
  using spec = Spec;
};

}  // namespace typeflow::testing

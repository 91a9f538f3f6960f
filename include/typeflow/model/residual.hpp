// residual<Layers...>: x + f(x), where f is Layers... run as a chain.
//
//   input (B, shape) -> f -> (B, shape), output = input + f(input)
//
// The chain's output shape must equal its input's (a compile error names
// both otherwise). The children's activations are kept in the residual's
// workspace; wrap the block in recompute<> to recompute them instead.
#pragma once

#include <cstddef>
#include <string>

#include "typeflow/model/chain.hpp"
#include "typeflow/model/chain_executor.hpp"

namespace typeflow {

template <class... Layers>
struct residual {
  static std::string type_name() { return "residual<" + detail::type_names<Layers...>() + ">"; }

  template <class In, class Context>
  struct bind : chain_binding<Context, In, false, Layers...> {
    using chain = chain_binding<Context, In, false, Layers...>;
    static_assert(layer_check<layer_at<Context::position, residual>, given<In, typename chain::output_shape>,
                              std::is_same_v<typename chain::output_shape, In>>::passed,
                  "residual<Layers...>: the block must keep its input's shape, since its output is added to "
                  "its input (see both shapes in the note below)");
    static_assert(layer_check<layer_at<Context::position, residual>, given<In>, !chain::all_alias>::passed,
                  "residual<Layers...>: the block computes nothing (every layer in it only reshapes)");
    using output_shape = In;
    static constexpr bool output_aliases_input = false;
    static constexpr bool gradient_in_place = false;
    static constexpr std::size_t flops_per_sample = chain::flops_per_sample + In::size;
  };
};

// Its executor, on every device: the chain, then the skip connection.
template <class... Layers, class Layer, int Batch, class Device>
class executor<residual<Layers...>, Layer, Batch, Device> : public chain_executor<Layer, Batch, Device> {
  using base = chain_executor<Layer, Batch, Device>;
  static constexpr std::size_t count = static_cast<std::size_t>(Batch) * Layer::input_shape::size;

 public:
  explicit executor(const layer_io<Device>& io) : base(io) {}

  void forward() {
    base::forward();
    add_in_place(*base::io().context, base::io().out, base::io().in, count);
  }

  // d_in = d_out (the skip) + the block's gradient.
  void backward() {
    base::backward();
    if (!base::io().d_in) return;
    add_in_place(*base::io().context, base::io().d_in, base::io().d_out, count);
  }
};

}  // namespace typeflow

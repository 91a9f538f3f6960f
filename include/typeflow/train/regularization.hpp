// Kernel and bias regularizers over a network's parameters (Keras's
// kernel_regularizer / bias_regularizer): the penalty added to the loss, and
// with it each penalty's gradient added to its parameter's gradient.
#pragma once

#include <cstddef>
#include <tuple>
#include <utility>

#include "typeflow/model/memory_plan.hpp"

namespace typeflow {

// The regularizers' total penalty over the parameters in `arena` (host
// memory laid out by Net's memory plan); with add_gradients, also adds each
// penalty's gradient to the gradient region.
template <class Net>
double apply_regularizers(std::byte* arena, bool add_gradients) {
  using plan = memory_plan<Net, 0, 0>;
  double total = 0;
  auto layer = [&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
    using params = typename Net::template layer<I>::params;
    [&]<std::size_t... P>(std::index_sequence<P...>) {
      (
          [&] {
            using param_type = std::tuple_element_t<P, typename params::tuple>;
            using regularizer = typename param_type::regularizer;
            if constexpr (regularizer::active && Net::trainable[I] && !param_type::frozen) {  // frozen ones are constants
              const std::size_t offset = plan::template tensor_offset<I, P>;
              const float* w = reinterpret_cast<const float*>(arena + offset);
              total += add_gradients ? regularizer::apply(w, reinterpret_cast<float*>(arena + plan::gradients_offset + offset),
                                                          param_type::stored_floats)
                                     : regularizer::penalty(w, param_type::stored_floats);
            }
          }(),
          ...);
    }(std::make_index_sequence<params::count>{});
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (layer(std::integral_constant<std::size_t, I>{}), ...);
  }(std::make_index_sequence<Net::layer_count>{});
  return total;
}

}  // namespace typeflow

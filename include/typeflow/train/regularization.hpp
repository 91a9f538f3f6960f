// Kernel and bias regularizers over a network's parameters (Keras's
// kernel_regularizer / bias_regularizer): the penalty added to the loss, and
// with it each penalty's gradient added to its parameter's gradient.
#pragma once

#include <cstddef>
#include <tuple>
#include <utility>
#include <vector>

#include "typeflow/model/memory_plan.hpp"

namespace typeflow {

// f.template operator()<Regularizer>(offset, floats) for each regularized
// tensor of Net's parameter region, trainable and not frozen (frozen ones
// are constants): offset in bytes from the region's start.
template <class Net, class F>
void for_each_regularized(F&& f) {
  using plan = memory_plan<Net, 0, 0>;
  auto layer = [&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
    using params = typename Net::template layer<I>::params;
    [&]<std::size_t... P>(std::index_sequence<P...>) {
      (
          [&] {
            using param_type = std::tuple_element_t<P, typename params::tuple>;
            using regularizer = typename param_type::regularizer;
            if constexpr (regularizer::active && Net::trainable[I] && !param_type::frozen)
              f.template operator()<regularizer>(plan::template tensor_offset<I, P>, param_type::stored_floats);
          }(),
          ...);
    }(std::make_index_sequence<params::count>{});
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (layer(std::integral_constant<std::size_t, I>{}), ...);
  }(std::make_index_sequence<Net::layer_count>{});
}

// The regularizers' total penalty over the parameters in `arena` (host
// memory laid out by Net's memory plan); with add_gradients, also adds each
// penalty's gradient to the gradient region.
template <class Net>
double apply_regularizers(std::byte* arena, bool add_gradients) {
  using plan = memory_plan<Net, 0, 0>;
  double total = 0;
  for_each_regularized<Net>([&]<class Regularizer>(std::size_t offset, std::size_t floats) {
    const float* w = reinterpret_cast<const float*>(arena + offset);
    total += add_gradients ? Regularizer::apply(w, reinterpret_cast<float*>(arena + plan::gradients_offset + offset), floats)
                           : Regularizer::penalty(w, floats);
  });
  return total;
}

// The same tensors as a table, for a device that applies the penalties from
// one (tf::cuda: backend/cuda/regularization.hpp).
struct regularized_tensor {
  std::size_t offset = 0;  // floats from the parameter region's start
  std::size_t size = 0;
  float l1 = 0.f, l2 = 0.f;
};
template <class Net>
std::vector<regularized_tensor> regularized_tensors() {
  std::vector<regularized_tensor> table;
  for_each_regularized<Net>([&]<class Regularizer>(std::size_t offset, std::size_t floats) {
    table.push_back({offset / sizeof(float), floats, Regularizer::l1_factor, Regularizer::l2_factor});
  });
  return table;
}

}  // namespace typeflow

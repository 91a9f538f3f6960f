// A network's parameters drawn from its initializers: tensor k (in arena
// order) from the stream mix_seed(seed, k + 1), so the same seed gives the
// same weights, bit for bit, on every device and strategy. Padded rows keep
// their zeros.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "typeflow/core/random.hpp"
#include "typeflow/model/memory_plan.hpp"

namespace typeflow {

// Fills the parameter region of `arena` (host memory laid out by Net's
// memory plan, zeroed).
template <class Net>
void initialize_parameters(std::byte* arena, std::uint64_t seed) {
  using plan = memory_plan<Net, 0, 0>;
  std::uint64_t salt = 0;
  auto layer = [&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
    using params = typename Net::template layer<I>::params;
    [&]<std::size_t... P>(std::index_sequence<P...>) {
      (
          [&] {
            using param_type = std::tuple_element_t<P, typename params::tuple>;
            std::vector<float> values(param_type::size);
            param_type::initializer::template fill<typename param_type::shape_type>(
                values.data(), random_stream{mix_seed(seed, ++salt), 0});
            float* rows =
                reinterpret_cast<float*>(arena + plan::template tensor_offset<I, P>);
            for (std::size_t r = 0; r < param_type::rows; ++r)
              std::memcpy(rows + r * param_type::row_stride, values.data() + r * param_type::row_length,
                          param_type::row_length * sizeof(float));
          }(),
          ...);
    }(std::make_index_sequence<params::count>{});
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (layer(std::integral_constant<std::size_t, I>{}), ...);
  }(std::make_index_sequence<Net::layer_count>{});
}

}  // namespace typeflow

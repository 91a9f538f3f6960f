// parameter_table<Net>: every parameter tensor of a bound network, in arena
// order: its name ("layers.1.kernel", "blocks.3.attn.qkv.kernel"), shape,
// place in the parameter region, padding and kind. Weights files, the
// optimizers (which tensors decay, which are statistics) and parameter()
// read it; it is the same on every device, since the memory plan is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "typeflow/model/layer.hpp"
#include "typeflow/model/memory_plan.hpp"
#include "typeflow/optimizers/update.hpp"

namespace typeflow {

template <class Net>
struct parameter_table {
  // One parameter tensor: where it is stored and how.
  struct info {
    std::string name;                 // "layers.1.kernel"
    std::vector<std::int64_t> shape;  // (784, 512)
    std::size_t offset = 0;           // bytes from the start of the parameter region
    std::size_t size = 0;             // elements
    std::size_t row_length = 1, row_stride = 1;
    std::size_t stored_floats = 0;    // with the rows' padding
    param_kind kind = param_kind::kernel;
    bool trainable = true;            // false inside frozen<...>: no gradient, no optimizer slot
  };

  // f(info) for every parameter, in arena order.
  template <class F>
  static void for_each(F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (of_layer<I>(f), ...);
    }(std::make_index_sequence<Net::layer_count>{});
  }

  // Throws std::out_of_range naming what is missing.
  static info find(std::string_view name) {
    std::optional<info> found;
    for_each([&](const info& p) {
      if (p.name == name) found = p;
    });
    if (!found) throw std::out_of_range("model has no parameter named \"" + std::string(name) + "\"");
    return *found;
  }

  // Each trainable tensor's place (in floats) and kind, as the optimizers
  // take them: all of them lie in the first trainable_floats of the region.
  static const std::vector<optimizers::parameter_tensor>& tensors() {
    static const std::vector<optimizers::parameter_tensor> table = [] {
      std::vector<optimizers::parameter_tensor> t;
      for_each([&](const info& p) {
        if (p.trainable) t.push_back({p.offset / sizeof(float), p.stored_floats, p.kind});
      });
      return t;
    }();
    return table;
  }

 private:
  template <std::size_t I, class F>
  static void of_layer(F& f) {
    using layer = typename Net::template layer<I>;
    using params = typename layer::params;
    [&]<std::size_t... P>(std::index_sequence<P...>) {
      (
          [&] {
            using param_type = std::tuple_element_t<P, typename params::tuple>;
            using shape_type = typename param_type::shape_type;
            f(info{(layer::absolute_names ? std::string() : "layers." + std::to_string(I) + ".") +
                       std::string(param_type::name),
                   std::vector<std::int64_t>(shape_type::dims.begin(), shape_type::dims.end()),
                   memory_plan<Net, 0, 0>::layer_parameter_offset[I] + params::template offset<P> * sizeof(float),
                   param_type::size, param_type::row_length, param_type::row_stride, param_type::stored_floats,
                   param_type::kind, Net::trainable[I]});
          }(),
          ...);
    }(std::make_index_sequence<params::count>{});
  }
};

}  // namespace typeflow

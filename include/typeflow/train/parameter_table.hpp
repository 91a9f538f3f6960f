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
    bool trainable = true;            // false inside frozen<...> and for a frozen_param: no gradient, no slot
    float lora_scale = 0.f;           // a LoRA matrix (layers/lora.hpp): its adapter's Alpha / Rank
  };

  // The kernel a LoRA matrix adapts: "blocks.0.attn.qkv.lora_kernel_a" ->
  // "blocks.0.attn.qkv.kernel"; and a kernel's adapter matrices, when it has them.
  static std::string lora_base_name(const std::string& lora_name) {
    return lora_name.substr(0, lora_name.rfind("lora_kernel_")) + "kernel";
  }
  static std::optional<std::pair<info, info>> lora_adapter_of(const info& kernel) {
    if (kernel.name.size() < 6 || kernel.name.compare(kernel.name.size() - 6, 6, "kernel") != 0) return std::nullopt;
    const std::string prefix = kernel.name.substr(0, kernel.name.size() - 6);
    std::optional<info> a, b;
    for_each([&](const info& p) {
      if (p.name == prefix + "lora_kernel_a") a = p;
      if (p.name == prefix + "lora_kernel_b") b = p;
    });
    if (!a || !b) return std::nullopt;
    return std::pair{*a, *b};
  }

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
  template <class P>
  static constexpr float lora_scale_of() {
    if constexpr (requires { P::lora_scale; })
      return P::lora_scale;
    else
      return 0.f;
  }
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
                   memory_plan<Net, 0, 0>::template tensor_offset<I, P>, param_type::size, param_type::row_length,
                   param_type::row_stride, param_type::stored_floats, param_type::kind,
                   Net::trainable[I] && !param_type::frozen, lora_scale_of<param_type>()});
          }(),
          ...);
    }(std::make_index_sequence<params::count>{});
  }
};

}  // namespace typeflow

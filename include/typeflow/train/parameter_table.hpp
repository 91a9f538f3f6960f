// parameter_table<Net>: every parameter tensor of a bound network, in arena
// order: its name ("layers.1.kernel", "blocks.3.attn.qkv.kernel"), shape,
// place in the parameter region, padding and kind. Weights files, the
// optimizers (which tensors decay, which are statistics) and parameter()
// read it; it is the same on every device, since the memory plan is.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "typeflow/contract/layer.hpp"
#include "typeflow/core/strided_view.hpp"
#include "typeflow/model/memory_plan.hpp"
#include "typeflow/optimizers/update.hpp"

namespace typeflow {

// One parameter tensor: where it is stored and how.
struct parameter_info {
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

namespace detail {

// A parameter as the compiler knows it: constants only, so that a layer's
// list is a static array and one function (not one copy per parameter and
// network) builds the table's strings and vectors from it.
struct parameter_facts {
  std::string_view name;  // within its layer: "kernel", "attn.qkv.kernel"
  const int* dims = nullptr;
  std::size_t rank = 0;
  std::size_t offset = 0, size = 0, row_length = 1, row_stride = 1, stored_floats = 0;
  param_kind kind = param_kind::kernel;
  bool trainable = true;
  float lora_scale = 0.f;
};

inline void append_parameters(std::vector<parameter_info>& table, std::size_t layer, bool absolute_names,
                              std::span<const parameter_facts> facts) {
  const std::string prefix = absolute_names ? std::string() : "layers." + std::to_string(layer) + ".";
  for (const parameter_facts& f : facts)
    table.push_back({prefix + std::string(f.name), std::vector<std::int64_t>(f.dims, f.dims + f.rank), f.offset,
                     f.size, f.row_length, f.row_stride, f.stored_floats, f.kind, f.trainable, f.lora_scale});
}

}  // namespace detail

template <class Net>
struct parameter_table {
  using info = parameter_info;

  // Whether any layer keeps moving statistics (batch_normalization): its
  // forward then reads every row of a batch together.
  static constexpr bool has_statistics = []<std::size_t... I>(std::index_sequence<I...>) {
    constexpr auto any_statistic = []<class Tuple>(std::type_identity<Tuple>) {
      return []<std::size_t... P>(std::index_sequence<P...>) {
        return ((std::tuple_element_t<P, Tuple>::kind == param_kind::statistic) || ... || false);
      }(std::make_index_sequence<std::tuple_size_v<Tuple>>{});
    };
    return (any_statistic(std::type_identity<typename Net::template layer<I>::params::tuple>{}) || ... || false);
  }(std::make_index_sequence<Net::layer_count>{});

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

  // A parameter's elements in a host region laid out as the parameter region.
  static std::vector<float> values_of(const info& p, const float* region) {
    const auto view = stored(p, region);
    return std::vector<float>(view.begin(), view.end());
  }
  // W (in, out) + s · A (in, r) · B (r, out), summed in double.
  static std::vector<float> merged_values(const info& p, const float* region) {
    std::vector<float> w = values_of(p, region);
    const auto adapter = lora_adapter_of(p);
    if (!adapter) return w;
    const std::vector<float> a = values_of(adapter->first, region), b = values_of(adapter->second, region);
    const std::size_t in = static_cast<std::size_t>(adapter->first.shape[0]);
    const std::size_t rank = static_cast<std::size_t>(adapter->first.shape[1]);
    const std::size_t out = static_cast<std::size_t>(adapter->second.shape[1]);
    const double scale = adapter->first.lora_scale;
    for (std::size_t i = 0; i < in; ++i)
      for (std::size_t j = 0; j < out; ++j) {
        double sum = 0;
        for (std::size_t k = 0; k < rank; ++k) sum += double{a[i * rank + k]} * b[k * out + j];
        w[i * out + j] = static_cast<float>(w[i * out + j] + scale * sum);
      }
    return w;
  }
  static strided_view<float> stored(const info& p, const float* region) {
    return {const_cast<float*>(region) + p.offset / sizeof(float), p.size, p.row_length, p.row_stride};
  }


  // Every parameter, in arena order: built once per network, so that each
  // caller runs a loop rather than its own copy of the unrolled walk over
  // the layers (which had made this table the largest code in a program).
  static const std::vector<info>& all() {
    static const std::vector<info> table = [] {
      std::vector<info> t;
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        (of_layer<I>(t), ...);
      }(std::make_index_sequence<Net::layer_count>{});
      return t;
    }();
    return table;
  }

  // f(info) for every parameter, in arena order.
  template <class F>
  static void for_each(F&& f) {
    for (const info& p : all()) f(p);
  }

  // Throws std::out_of_range naming what is missing.
  static const info& find(std::string_view name) {
    for (const info& p : all())
      if (p.name == name) return p;
    throw std::out_of_range("model has no parameter named \"" + std::string(name) + "\"");
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
  template <std::size_t I, std::size_t P>
  static constexpr detail::parameter_facts facts_of() {
    using param_type = std::tuple_element_t<P, typename Net::template layer<I>::params::tuple>;
    using shape_type = typename param_type::shape_type;
    return {param_type::name,
            shape_type::dims.data(),
            shape_type::dims.size(),
            memory_plan<Net, 0, 0>::template tensor_offset<I, P>,
            param_type::size,
            param_type::row_length,
            param_type::row_stride,
            param_type::stored_floats,
            param_type::kind,
            Net::trainable[I] && !param_type::frozen,
            lora_scale_of<param_type>()};
  }
  template <std::size_t I>
  static void of_layer(std::vector<info>& table) {
    using layer = typename Net::template layer<I>;
    static constexpr auto facts = []<std::size_t... P>(std::index_sequence<P...>) {
      return std::array<detail::parameter_facts, sizeof...(P)>{facts_of<I, P>()...};
    }(std::make_index_sequence<layer::params::count>{});
    detail::append_parameters(table, I, layer::absolute_names, facts);
  }
};

}  // namespace typeflow

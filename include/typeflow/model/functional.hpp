// functional<...>: a network written as a graph, Keras's functional API with
// the graph checked by the compiler. Two forms:
//
// One input, one output (the input is "input", the last node the output):
//   using net = tf::functional<tf::input<28, 28, 1>,
//       tf::node<"conv", tf::conv2d<16, 3, tf::relu>, "input">,
//       tf::node<"block", tf::sequential<tf::conv2d<16, 3, tf::relu, tf::same>, tf::conv2d<16, 3, tf::same>>, "conv">,
//       tf::node<"sum", tf::add, "block", "conv">,
//       tf::node<"pooled", tf::global_average_pooling2d, "sum">,
//       tf::node<"logits", tf::dense<10>, "pooled">>;
//
// Named inputs and outputs (input nodes anywhere; outputs<...> last, or
// the last node is the one output):
//   using net = tf::functional<
//       tf::node<"title", tf::typed_input<tf::int32, 12>>,
//       tf::node<"tags", tf::input<12>>,
//       tf::node<"title_features", tf::sequential<tf::embedding<1000, 16>, tf::flatten>, "title">,
//       tf::node<"features", tf::concatenate<>, "title_features", "tags">,
//       tf::node<"priority", tf::dense<1>, "features">,
//       tf::node<"department", tf::dense<4>, "features">,
//       tf::outputs<"priority", "department">>;
//
// Either is a network like sequential<input, graph<Nodes...>> (model/graph.hpp
// has the rules and the memory plan), so everything a sequential network
// does (policies, strategies, both devices, checkpoints) it does too; its
// parameters are named after the nodes ("conv.kernel", "block.conv2d_1.bias").
// Named inputs travel packed: the network's input is one (B, sum of sizes)
// float32 buffer (int32 parts in its 4-byte slots), which a record of named
// parts fills (data/record.hpp) and each input node unpacks. Several outputs
// leave packed the same way, (B, sum of sizes); the model's compile() takes
// a loss per output (train/output_losses.hpp), and network_io<Net> tells
// where each part lies.
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "typeflow/layers/input.hpp"
#include "typeflow/layers/merge.hpp"
#include "typeflow/model/graph.hpp"
#include "typeflow/model/graph_executor.hpp"
#include "typeflow/model/sequential.hpp"

namespace typeflow {

namespace detail {

// The nodes of a functional<>'s arguments, with its outputs<...> (if last)
// turned into the node that packs them.
template <class... Args>
struct functional_nodes {
  using all = std::tuple<Args...>;
  static constexpr std::size_t n = sizeof...(Args);
  using last = std::tuple_element_t<n - 1, all>;
  static constexpr bool has_outputs = is_outputs_v<last>;
  template <std::size_t... I>
  static auto make(std::index_sequence<I...>) {
    if constexpr (has_outputs)
      return std::type_identity<std::tuple<std::tuple_element_t<I, all>..., typename last::pack_node>>{};
    else
      return std::type_identity<all>{};
  }
  using type = typename decltype(make(std::make_index_sequence<has_outputs ? n - 1 : n>{}))::type;
};

// The packed input of named input nodes: float32 slots, one per value.
template <class NodeTuple>
struct packed_inputs;
template <class... Nodes>
struct packed_inputs<std::tuple<Nodes...>> {
  static constexpr std::size_t size = (std::size_t{0} + ... + input_size<typename Nodes::layer>());
  static constexpr bool any = (Nodes::is_input_node || ...);
  using type = typed_input<float32, static_cast<int>(size > 0 ? size : 1)>;
};

template <class Input, bool Named, class NodeTuple>
struct functional_network;
template <class Input, bool Named, class... Nodes>
struct functional_network<Input, Named, std::tuple<Nodes...>> {
  using type = network_sequential<Input, functional_body<Named, Nodes...>>;
};

template <class First, class... Rest>
struct functional_base {
  static constexpr bool named = !is_input_v<First>;
  using nodes = typename std::conditional_t<named, functional_nodes<First, Rest...>,
                                            functional_nodes<Rest...>>::type;
  static_assert(!named || packed_inputs<nodes>::any,
                "functional<...>: begin with the input, e.g. functional<input<28, 28, 1>, nodes...>, or declare "
                "named inputs as nodes, e.g. node<\"image\", input<28, 28, 1>>");
  using input = typename std::conditional_t<named, packed_inputs<nodes>, std::type_identity<First>>::type;
  using type = typename functional_network<input, named, nodes>::type;
};

}  // namespace detail

template <class First, class... Rest>
struct functional : detail::functional_base<First, Rest...>::type {};

template <class First, class... Rest>
inline constexpr bool is_sequential_v<functional<First, Rest...>> = true;

}  // namespace typeflow

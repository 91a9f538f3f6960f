// A graph's nodes (model/graph.hpp): node<Name, Layer, Inputs...>,
// outputs<...> and shared<"x">, which a user writes, and how graph_binding
// finds what each node reads and binds it, node after node (bind_nodes).
// The rules they obey, with the note that names the node, are in
// model/graph_checks.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "typeflow/core/fixed_string.hpp"
#include "typeflow/layers/input.hpp"
#include "typeflow/layers/merge.hpp"
#include "typeflow/model/chain.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {

// One node: its name, its layer (a layer, a block, a merge or shared<"x">)
// and the names of the nodes it reads ("input" is the graph's input).
// The name a named input node reads: the network's packed inputs, which no
// node names (functional<> packs its named inputs into one buffer).
inline constexpr std::string_view packed_inputs_name = "(inputs)";

template <fixed_string Name, class Layer, fixed_string... Inputs>
struct node {
  static constexpr std::string_view name = Name.view();
  using layer = Layer;
  // node<"title", typed_input<int32, 12>>: one of functional<>'s named
  // inputs; it reads its part of the packed inputs.
  static constexpr bool is_input_node = is_input_v<Layer>;
  static constexpr bool declares_inputs = sizeof...(Inputs) > 0;
  static constexpr std::size_t input_count = is_input_node && !declares_inputs ? 1 : sizeof...(Inputs);
  static constexpr std::array<std::string_view, input_count> inputs = [] {
    if constexpr (is_input_node && !declares_inputs)
      return std::array<std::string_view, 1>{packed_inputs_name};
    else
      return std::array<std::string_view, sizeof...(Inputs)>{Inputs.view()...};
  }();
};

// functional<>'s outputs, in order: outputs<"priority", "department">
// after the nodes. Without it the last node is the one output.
template <fixed_string... Names>
struct outputs {
  static_assert(sizeof...(Names) > 0, "outputs<Names...>: name at least one node");
  static constexpr bool is_output_list = true;
  static constexpr std::size_t count = sizeof...(Names);
  static constexpr std::array<std::string_view, sizeof...(Names)> names{Names.view()...};
  // The node functional<> ends with: the outputs packed side by side.
  using pack_node = node<"(outputs)", detail::pack_outputs, Names...>;
};
template <class T>
inline constexpr bool is_outputs_v = requires { T::is_output_list; };

// The layer of node Node, applied again: the same parameters, its own input.
template <fixed_string Node>
struct shared {
  static constexpr bool is_shared_use = true;
  static constexpr std::string_view node = Node.view();
  static std::string type_name() { return "shared<\"" + std::string(node) + "\">"; }
};

// (Found by its member, not by matching shared<N>: nvcc's front end does
// not deduce a class-type template argument in a partial specialisation.)
template <class T>
inline constexpr bool is_shared_v = requires { T::is_shared_use; };

// A check whose name carries the node and the facts: g++ prints
// "'graph_check<node<..."b"...>, given<shape<8>, shape<4>>, false>::passed'
// evaluates to false" under the rule's sentence.
template <class Where, class Given, bool Ok>
struct graph_check {
  static constexpr bool passed = Ok;
};
struct graph_input_node {};  // the graph's "input", in a check's note
template <class Node>
struct same_name_as {};
template <class Node>
struct reads_later_node {};
struct read_by_nothing {};

namespace detail {

// The graph's input as node 0: its output is the graph's input buffer.
template <class Shape, class DType>
struct graph_input_binding : layer_defaults {
  using input_shape = Shape;
  using output_shape = Shape;
  using output_dtype = DType;
  static constexpr bool output_aliases_input = true;
  static constexpr bool gradient_in_place = true;
  static constexpr bool computes_nothing = true;
};

template <class Layer>
constexpr std::size_t input_size() {
  if constexpr (is_input_v<Layer>)
    return Layer::shape_type::size;
  else
    return 0;
}

// Stands for a node whose inputs could not be found, so that one error is
// reported and not a cascade.
struct unbound_node : layer_defaults {
  using input_shape = shape<1>;
  using output_shape = shape<1>;
};

// A named input node: its part of the packed inputs (B, Width), the
// columns [Offset, Offset + size), unpacked into its own buffer in its own
// dtype (int32 ids travel in the float buffer's 4-byte slots, bit for bit).
template <class Input, std::size_t Offset, std::size_t Width>
struct input_slice_binding : layer_defaults {
  static constexpr bool is_input_slice = true;
  using input_shape = shape<static_cast<int>(Width)>;
  using output_shape = typename Input::shape_type;
  using output_dtype = typename Input::dtype;
  static constexpr std::size_t offset = Offset;
  static constexpr std::size_t width = Width;
};

// Where node K's part begins in the packed inputs: the sizes of the input
// nodes before it.
template <class NodeList, std::size_t K>
constexpr std::size_t input_offset() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    std::size_t sum = 0;
    ((sum += std::tuple_element_t<I, NodeList>::is_input_node
                 ? input_size<typename std::tuple_element_t<I, NodeList>::layer>()
                 : 0),
     ...);
    return sum;
  }(std::make_index_sequence<K - 1>{});
}

template <class Node>
struct node_name_part {
  static constexpr std::string_view value = Node::name;
};

inline constexpr std::size_t no_node = static_cast<std::size_t>(-1);

template <class... Nodes>
struct graph_names {
  static constexpr std::size_t count = sizeof...(Nodes);
  // Whether the inputs are named nodes (functional<>'s several inputs);
  // then node 0 is their packed buffer, which only they read.
  static constexpr bool named_inputs = (Nodes::is_input_node || ...);
  static constexpr std::array<std::string_view, count + 1> names{
      named_inputs ? packed_inputs_name : std::string_view("input"), Nodes::name...};
  // The first node (0 = input) with this name, or no_node.
  static constexpr std::size_t find(std::string_view name) {
    for (std::size_t i = 0; i <= count; ++i)
      if (names[i] == name) return i;
    return no_node;
  }
};

// Node K's sources (node indices, 0 = input).
template <class Names, class Node>
constexpr auto sources_of() {
  std::array<std::size_t, Node::input_count> at{};
  for (std::size_t j = 0; j < Node::input_count; ++j) at[j] = Names::find(Node::inputs[j]);
  return at;
}

// The spec a node runs: its layer, or for shared<"x"> node x's layer.
template <class NodeList, class Names, class Layer>
struct spec_of_layer {
  using type = Layer;
  static constexpr std::size_t target = no_node;
};
template <class NodeList, class Names, class Layer>
  requires is_shared_v<Layer>
struct spec_of_layer<NodeList, Names, Layer> {
  static constexpr std::size_t target = Names::find(Layer::node);
  static constexpr bool found = target != no_node && target > 0;
  using target_layer = typename std::conditional_t<found, std::tuple_element<(found ? target - 1 : 0), NodeList>,
                                                   std::type_identity<node<"", unbound_node>>>::type::layer;
  // shared<> of a shared<> or of a merge is refused by the graph's checks.
  using type = std::conditional_t<is_shared_v<target_layer> || is_merge_v<target_layer>, unbound_node, target_layer>;
};

// How many inputs of the nodes read node i (0 = input).
template <class Names, class... Nodes>
constexpr std::size_t readers_of(std::size_t i) {
  std::size_t n = 0;
  (
      [&] {
        for (std::size_t s : sources_of<Names, Nodes>())
          if (s == i) ++n;
      }(),
      ...);
  return n;
}
template <class Names, class NodeList>
struct reader_counts;
template <class Names, class... Nodes>
struct reader_counts<Names, std::tuple<Nodes...>> {
  static constexpr std::size_t of(std::size_t i) { return readers_of<Names, Nodes...>(i); }
};

// Whether nodes K and K + 1 (1-based) form a link of a chain: K + 1 is a
// layer reading only K, and nothing else reads K. Then they see each other
// as neighbours, as in a sequential network, so a matmul fuses the
// activation after it and the graph of a chain is that chain, bit for bit.
template <class NodeList, class Names, std::size_t K>
constexpr bool linked() {
  if constexpr (K < 1 || K >= std::tuple_size_v<NodeList>) {
    return false;
  } else {
    using from = std::tuple_element_t<K - 1, NodeList>;
    using to = std::tuple_element_t<K, NodeList>;
    if constexpr (is_merge_v<typename from::layer> || is_merge_v<typename to::layer> || to::input_count != 1)
      return false;
    else
      return sources_of<Names, to>()[0] == K && reader_counts<Names, NodeList>::of(K) == 1;
  }
}

// Binds node K (1-based) of NodeList, given the nodes bound before it.
template <class Outer, class NodeList, class Names, class Bound, std::size_t K>
struct bind_node {
  using node_type = std::tuple_element_t<K - 1, NodeList>;
  static constexpr auto sources = sources_of<Names, node_type>();
  static constexpr bool sources_ok = [] {
    for (std::size_t s : sources)
      if (s == no_node || s >= K) return false;
    return sources.size() > 0;
  }();
  using lookup = spec_of_layer<NodeList, Names, typename node_type::layer>;
  using spec = typename lookup::type;

  template <std::size_t J>
  using source = std::tuple_element_t<(sources_ok ? sources[J] : 0), Bound>;
  // A layer reading a named input node sees that input before it, as in a
  // sequential network (an embedding checks that it reads token ids).
  static constexpr std::size_t source_index = sources_ok ? sources[0] : 0;
  static constexpr bool reads_input_node = [] {
    if constexpr (source_index >= 1)
      return std::tuple_element_t<source_index - 1, NodeList>::is_input_node;
    else
      return false;
  }();

  static auto pick() {
    if constexpr (!sources_ok || std::is_same_v<spec, unbound_node>) {
      return std::type_identity<unbound_node>{};
    } else if constexpr (node_type::is_input_node) {
      if constexpr (node_type::declares_inputs || sources[0] != 0)
        return std::type_identity<unbound_node>{};
      else
        return std::type_identity<input_slice_binding<spec, input_offset<NodeList, K>(),
                                                      source<0>::output_shape::size>>{};
    } else if constexpr (is_merge_v<spec>) {
      return [&]<std::size_t... J>(std::index_sequence<J...>) {
        return std::type_identity<merge_binding<spec, typename source<J>::output_shape...>>{};
      }(std::make_index_sequence<node_type::input_count>{});
    } else if constexpr (node_type::input_count != 1) {
      return std::type_identity<unbound_node>{};
    } else {
      // A node reading the graph's input sees what comes before the graph
      // (an embedding checks that it reads token ids); a link of a chain
      // sees its neighbours; others see nothing.
      using previous = typename std::conditional_t<
          linked<NodeList, Names, K - 1>() || reads_input_node,
          spec_of_layer<NodeList, Names, typename std::tuple_element_t<(source_index >= 1 ? source_index - 1 : 0), NodeList>::layer>,
          std::type_identity<std::conditional_t<sources[0] == 0 && is_input_v<typename Outer::previous>,
                                                typename Outer::previous, void>>>::type;
      using next = typename std::conditional_t<
          linked<NodeList, Names, K>(),
          spec_of_layer<NodeList, Names,
                        typename std::tuple_element_t<(K < std::tuple_size_v<NodeList> ? K : 0), NodeList>::layer>,
          std::type_identity<void>>::type;
      using precision =
          layer_precision<typename Outer::precision::compute, typename source<0>::output_dtype, false>;
      using context = nested_context<Outer, previous, next, precision>;
      return std::type_identity<typename spec::template bind<typename source<0>::output_shape, context>>{};
    }
  }
  using type = typename decltype(pick())::type;
};

template <class Outer, class NodeList, class Names, class Bound, std::size_t K, std::size_t Count,
          bool Done = (K > Count)>
struct bind_nodes {
  using bound = typename bind_node<Outer, NodeList, Names, Bound, K>::type;
  using type = typename bind_nodes<Outer, NodeList, Names,
                                   decltype(std::tuple_cat(std::declval<Bound>(), std::declval<std::tuple<bound>>())),
                                   K + 1, Count>::type;
};
template <class Outer, class NodeList, class Names, class Bound, std::size_t K, std::size_t Count>
struct bind_nodes<Outer, NodeList, Names, Bound, K, Count, true> {
  using type = Bound;
};

// The scope a graph's parameters get inside another combinator.
struct graph_scope {
  static constexpr std::string_view value = "graph";
};

}  // namespace detail

}  // namespace typeflow

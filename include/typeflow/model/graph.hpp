// graph<Nodes...>: layers wired as a directed acyclic graph, Keras's
// functional API as a type. functional<input<...>, Nodes...> (model/
// functional.hpp) is a network whose body is one graph; graph<Nodes...> is
// the same block used as one layer anywhere a layer goes.
//
//   using block = tf::graph<
//       tf::node<"a", tf::dense<64, tf::relu>, "input">,   // name, layer, what it reads
//       tf::node<"b", tf::dense<64, tf::relu>, "input">,
//       tf::node<"ab", tf::concatenate<>, "a", "b">,        // a merge reads several nodes
//       tf::node<"c", tf::shared<"a">, "ab">,               // node a's layer again: one set of weights
//       tf::node<"out", tf::add, "c", "a">>;                // the last node is the output
//
// "input" is the graph's input. A node reads the input or nodes before it, so
// the graph is acyclic by construction; every node but the last must be read.
// The compiler checks all of it, and each rule names the node (graph_check
// in the note under the error).
//
// Memory: every node's output is kept in the graph's workspace for backward
// (except views, which alias their input, and the last node's, which is the
// graph's output buffer). Backward walks the nodes in reverse. The gradient
// of a node's output lives from the backward of its last reader to its own,
// and gradient buffers whose lives do not overlap share bytes: the offsets
// are found at compile time by first fit over those intervals
// (gradient_offset). Where branches met, the gradients are summed: the first
// reader to run backward writes the buffer, the others write a spare buffer
// that is then added in. A node using shared<"x"> writes its parameter
// gradients to a spare region that is added to x's, so the shared layer's
// gradient is the sum over its uses.
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

// The rules one node must satisfy, each stated with the node's name.
// Wired: every name is unique and found, and read in order; the rules that
// follow from the wiring (every node read, merges' shapes) are checked only then,
// so that one mistake gives one error.
template <class NodeList, class Names, class Bound, std::size_t K, class Reads, bool Wired>
struct check_node {
  using node_type = std::tuple_element_t<K - 1, NodeList>;
  static constexpr std::size_t first_with_name = Names::find(node_type::name);
  static_assert(graph_check<node_type, same_name_as<std::conditional_t<(first_with_name > 0 && first_with_name < K),
                                                                       std::tuple_element_t<(first_with_name > 0 && first_with_name < K ? first_with_name - 1 : 0), NodeList>,
                                                                       graph_input_node>>,
                            first_with_name == K>::passed,
                "graph<Nodes...>: two nodes have one name (\"input\" is the graph's input); each node needs its own");
  static constexpr auto sources = sources_of<Names, node_type>();
  static constexpr bool all_found = [] {
    for (std::size_t s : sources)
      if (s == no_node) return false;
    return true;
  }();
  static constexpr bool packs = is_pack_v<typename node_type::layer>;
  static_assert(graph_check<node_type, given<>, all_found || packs>::passed,
                "graph<Nodes...>: a node reads a name that is no node of the graph (the node, with the names it "
                "reads, is in the note below)");
  static_assert(graph_check<node_type, given<>, all_found || !packs>::passed,
                "functional<...>: outputs<...> names a node that does not exist (the names are in the note below)");
  static constexpr bool outputs_distinct = [] {
    for (std::size_t a = 0; a < sources.size(); ++a)
      for (std::size_t b = a + 1; b < sources.size(); ++b)
        if (sources[a] == sources[b]) return false;
    return true;
  }();
  static_assert(graph_check<node_type, given<>, outputs_distinct || !packs || !all_found>::passed,
                "functional<...>: outputs<...> names a node twice; each output is named once");
  static constexpr std::size_t latest = [] {
    std::size_t m = 0;
    for (std::size_t s : sources)
      if (s != no_node) m = std::max(m, s);
    return m;
  }();
  static_assert(graph_check<node_type, reads_later_node<std::tuple_element_t<(latest >= K ? latest - 1 : 0), NodeList>>,
                            latest < K>::passed,
                "graph<Nodes...>: a node reads itself or a node after it, which would make a cycle; a node reads "
                "only the input and the nodes before it");
  using layer = typename node_type::layer;
  static constexpr bool merge = is_merge_v<layer>;
  static_assert(graph_check<node_type, given<>, merge || node_type::input_count == 1>::passed,
                "graph<Nodes...>: a layer node reads exactly one node; only merge layers (add, concatenate<>, ...) "
                "read several");
  static_assert(graph_check<node_type, given<>, !merge || node_type::input_count >= 2 || is_pack_v<layer>>::passed,
                "graph<Nodes...>: a merge node reads two nodes or more");
  static_assert(graph_check<node_type, given<>, !(node_type::is_input_node && node_type::declares_inputs)>::passed,
                "functional<...>: an input node reads nothing; write node<\"name\", input<...>> with no names after "
                "the layer");
  static_assert(graph_check<node_type, given<>, Reads::value[K] || K == Names::count || !Wired || node_type::is_input_node>::passed,
                "graph<Nodes...>: nothing reads this node; every node but the outputs (the last node, or those "
                "outputs<...> names) must feed another");
  static_assert(graph_check<node_type, given<>, Reads::value[K] || !Wired || !node_type::is_input_node>::passed,
                "functional<...>: nothing reads this input; every input must feed a node");
};

}  // namespace detail

// A graph's bound facts: its nodes bound in order, the rules checked, and
// the layout of its workspace and scratch (used by graph_executor).
template <class Context, class In, bool NamedInputs, class... Nodes>
struct graph_binding : layer_defaults {
  static constexpr bool is_graph = true;
  static constexpr std::size_t count = sizeof...(Nodes);  // nodes; index 0 is the input
  static_assert(count > 0, "graph<Nodes...>: a graph needs at least one node");
  using node_list = std::tuple<Nodes...>;
  using names = detail::graph_names<Nodes...>;
  static_assert(NamedInputs || !names::named_inputs,
                "graph<Nodes...>: input nodes (node<\"x\", input<...>>) belong to functional<> without a leading "
                "input<...>; a graph block reads its one input as \"input\"");
  using input_binding = detail::graph_input_binding<In, typename Context::precision::input>;
  using bound = typename detail::bind_nodes<Context, node_list, names, std::tuple<input_binding>, 1, count>::type;
  template <std::size_t K>
  using node_at = std::tuple_element_t<K, bound>;  // 0: the input
  template <std::size_t K>
  using node_type = std::tuple_element_t<K - 1, node_list>;
  template <std::size_t K>
  using spec_at = typename detail::bind_node<Context, node_list, names, bound, K>::spec;

  static constexpr std::size_t max_inputs = std::max({std::size_t{1}, Nodes::input_count...});
  // raw_sources[k][j]: the node that node k's input j reads (0 = input), or
  // no_node; sources: the same where the wiring is sound (0 elsewhere, so
  // that one mistake gives one error, not out-of-range reads).
  static constexpr auto raw_sources = [] {
    std::array<std::array<std::size_t, max_inputs>, count + 1> at{};
    std::size_t k = 1;
    ((
         [&] {
           const auto s = detail::sources_of<names, Nodes>();
           for (std::size_t j = 0; j < s.size(); ++j) at[k][j] = s[j];
         }(),
         ++k),
     ...);
    return at;
  }();
  static constexpr std::array<std::size_t, count + 1> input_counts{std::size_t{0}, Nodes::input_count...};
  // Named input nodes: they unpack the packed inputs and take no gradient.
  static constexpr std::array<bool, count + 1> is_input_node{false, Nodes::is_input_node...};
  static constexpr auto sources = [] {
    auto at = raw_sources;
    for (std::size_t k = 1; k <= count; ++k)
      for (std::size_t j = 0; j < input_counts[k]; ++j)
        if (at[k][j] >= k) at[k][j] = 0;
    return at;
  }();

  // Whether something reads node i.
  struct reads {
    static constexpr auto value = [] {
      std::array<bool, count + 1> read{};
      for (std::size_t k = 1; k <= count; ++k)
        for (std::size_t j = 0; j < input_counts[k]; ++j)
          if (sources[k][j] <= count) read[sources[k][j]] = true;
      return read;
    }();
  };
  // Whether every name is unique and every node reads earlier ones.
  static constexpr bool wired = [] {
    for (std::size_t k = 1; k <= count; ++k) {
      if (names::find(names::names[k]) != k) return false;
      for (std::size_t j = 0; j < input_counts[k]; ++j)
        if (raw_sources[k][j] >= k) return false;
    }
    return true;
  }();
  static_assert(graph_check<graph_input_node, given<In>, reads::value[0] || !wired>::passed,
                "graph<Nodes...>: no node reads the graph's input (\"input\")");
  static constexpr bool checked = []<std::size_t... K>(std::index_sequence<K...>) {
    return ((sizeof(detail::check_node<node_list, names, bound, K + 1, reads, wired>) > 0) && ...);
  }(std::make_index_sequence<count>{});

 private:
  template <class F>
  static constexpr auto per_node(F f) {
    return [&]<std::size_t... K>(std::index_sequence<K...>) {
      return std::array{f.template operator()<node_at<K>>()...};
    }(std::make_index_sequence<count + 1>{});
  }
  template <std::size_t K>
  static constexpr std::size_t shared_target() {
    if constexpr (K == 0)
      return detail::no_node;
    else
      return detail::spec_of_layer<node_list, names, typename node_type<K>::layer>::target;
  }
  template <std::size_t K>
  static constexpr bool merge_node() {
    if constexpr (K == 0)
      return false;
    else
      return is_merge_v<typename node_type<K>::layer>;
  }

 public:
  // For shared<"x"> at node k, x's index; no_node elsewhere.
  static constexpr auto shared_with = []<std::size_t... K>(std::index_sequence<K...>) {
    return std::array<std::size_t, count + 1>{shared_target<K>()...};
  }(std::make_index_sequence<count + 1>{});
  static constexpr auto is_merge = []<std::size_t... K>(std::index_sequence<K...>) {
    return std::array<bool, count + 1>{merge_node<K>()...};
  }(std::make_index_sequence<count + 1>{});

  // given<the shapes node K reads...>, for the checks' notes.
  template <std::size_t K>
  static auto given_of() {
    if constexpr (K == 0)
      return given<In>{};
    else
      return [&]<std::size_t... J>(std::index_sequence<J...>) {
        return given<typename node_at<(sources[K][J] < K ? sources[K][J] : 0)>::output_shape...>{};
      }(std::make_index_sequence<input_counts[K]>{});
  }
  template <std::size_t K>
  using given_at = decltype(given_of<K>());

  template <std::size_t K>
  static constexpr bool shared_fits() {
    if constexpr (K == 0 || shared_with[K] == detail::no_node) {
      return true;
    } else {
      using here = node_at<K>;
      using there = node_at<(shared_with[K] < K ? shared_with[K] : 0)>;
      return std::is_same_v<typename here::params, typename there::params>;
    }
  }
  template <std::size_t K>
  struct check_shared {
    static constexpr std::size_t target = shared_with[K];
    static_assert(K == 0 || target == detail::no_node || (target > 0 && target < K),
                  "graph<Nodes...>: shared<\"x\"> names a node that does not exist or comes later; name a node "
                  "before this one");
    static_assert(graph_check<std::conditional_t<(K > 0), node_type<(K > 0 ? K : 1)>, graph_input_node>,
                              given_at<K>, shared_fits<K>() || !wired>::passed,
                  "graph<Nodes...>: shared<\"x\"> applies node x's layer to an input whose shape gives it other "
                  "parameters than at x; a shared layer needs inputs of one shape");
  };
  static constexpr bool shared_checked = []<std::size_t... K>(std::index_sequence<K...>) {
    return ((sizeof(check_shared<K>) > 0) && ...);
  }(std::make_index_sequence<count + 1>{});

  template <std::size_t K>
  struct check_merge {
    static constexpr bool ok = [] {
      if constexpr (requires { node_at<K>::shapes_ok; })
        return node_at<K>::shapes_ok && node_at<K>::count_ok;
      else
        return true;
    }();
    static_assert(graph_check<std::conditional_t<(K > 0), node_type<(K > 0 ? K : 1)>, graph_input_node>,
                              given_at<K>, ok || !wired>::passed,
                  "graph<Nodes...>: a merge's inputs do not fit: add, subtract, multiply, average, maximum and "
                  "minimum take inputs of one shape (subtract exactly two), concatenate<Axis> inputs equal but "
                  "along Axis, dot two vectors of one length");
  };
  static constexpr bool merges_checked = []<std::size_t... K>(std::index_sequence<K...>) {
    return ((sizeof(check_merge<K>) > 0) && ...);
  }(std::make_index_sequence<count + 1>{});

  static_assert(checked && shared_checked && merges_checked);

  // functional<>'s inputs and outputs, in order: the named input nodes (or
  // node 0, "input"), and the nodes outputs<...> names (or the last node).
  static constexpr bool packs_outputs = is_pack_v<typename node_type<count>::layer>;
  static constexpr std::size_t output_count = packs_outputs ? input_counts[count] : 1;
  static constexpr auto output_nodes = [] {
    std::array<std::size_t, output_count> at{};
    for (std::size_t j = 0; j < output_count; ++j) at[j] = packs_outputs ? sources[count][j] : count;
    return at;
  }();
  static constexpr std::size_t input_node_count = names::named_inputs ? (std::size_t{Nodes::is_input_node} + ...) : 1;
  static constexpr auto input_nodes = [] {
    std::array<std::size_t, input_node_count> at{};
    std::size_t j = 0;
    for (std::size_t k = 1; k <= count && names::named_inputs; ++k)
      if (is_input_node[k]) at[j++] = k;
    return at;
  }();

  using input_shape = In;
  using output_shape = typename node_at<count>::output_shape;
  static_assert(std::is_same_v<typename node_at<count>::output_dtype, float32>,
                "graph<Nodes...>: the last node hands on float32");
  static constexpr bool output_aliases_input = false;
  static constexpr bool gradient_in_place = false;

  static constexpr auto out_sizes = per_node([]<class L>() { return L::output_shape::size; });
  static constexpr auto out_bytes =
      per_node([]<class L>() { return L::output_shape::size * sizeof(typename L::output_dtype::value_type); });
  static constexpr auto aliases = per_node([]<class L>() { return L::output_aliases_input; });
  static constexpr auto in_place = per_node([]<class L>() { return L::gradient_in_place; });
  static constexpr auto ws_per_sample = per_node([]<class L>() { return L::workspace_bytes_per_sample; });
  static constexpr auto ws_per_step = per_node([]<class L>() { return L::workspace_bytes_per_step; });
  static constexpr auto child_scratch_per_sample = per_node([]<class L>() { return L::scratch_bytes_per_sample; });
  static constexpr auto child_scratch_per_step = per_node([]<class L>() { return L::scratch_bytes_per_step; });
  static constexpr auto node_flops = per_node([]<class L>() { return L::flops_per_sample; });
  static constexpr auto uses_tied = per_node([]<class L>() { return L::uses_tied_embedding; });
  // Parameters belong to the node that declares the layer; shared<> uses add none.
  static constexpr auto own_param_floats = [] {
    auto floats = per_node([]<class L>() { return L::params::floats; });
    for (std::size_t k = 0; k <= count; ++k)
      if (shared_with[k] != detail::no_node) floats[k] = 0;
    return floats;
  }();
  static constexpr auto own_frozen_floats = [] {
    auto floats = per_node([]<class L>() { return L::params::frozen_floats; });
    for (std::size_t k = 0; k <= count; ++k)
      if (shared_with[k] != detail::no_node) floats[k] = 0;
    return floats;
  }();
  static constexpr bool uses_tied_embedding = [] {
    for (bool b : uses_tied)
      if (b) return true;
    return false;
  }();

  static constexpr std::size_t flops_per_sample = [] {
    std::size_t sum = 0;
    for (auto f : node_flops) sum += f;
    return sum;
  }();

  // Where node k's output is: the graph's input buffer (node 0 and views of
  // it), the graph's output (the last node, unless it is a view: then it is
  // copied there), or its own kept buffer.
  static constexpr std::size_t from_input = detail::no_node, to_output = detail::no_node - 1;
  static constexpr auto output_home = [] {
    std::array<std::size_t, count + 1> home{};
    home[0] = from_input;
    for (std::size_t k = 1; k <= count; ++k) {
      if (aliases[k])
        home[k] = home[sources[k][0]];
      else
        home[k] = k == count ? to_output : k;
    }
    return home;
  }();
  static constexpr bool output_is_view = aliases[count];

  // Gradients. Edge (k, j) is node k's input j. The first of a source's
  // readers to run backward (the latest node; within a merge, the first
  // input) writes its gradient buffer; the others write the spare buffer
  // and add it in.
  static constexpr auto edge_writes = [] {
    std::array<std::array<bool, max_inputs>, count + 1> writes{};
    std::array<bool, count + 1> written{};
    for (std::size_t k = count; k >= 1; --k)
      for (std::size_t j = 0; j < input_counts[k]; ++j) {
        const std::size_t s = sources[k][j];
        writes[k][j] = !written[s];
        written[s] = true;
      }
    return writes;
  }();
  static constexpr auto reader_count = [] {
    std::array<std::size_t, count + 1> n{};
    for (std::size_t k = 1; k <= count; ++k)
      for (std::size_t j = 0; j < input_counts[k]; ++j) ++n[sources[k][j]];
    return n;
  }();
  static constexpr auto last_reader = [] {
    std::array<std::size_t, count + 1> last{};
    for (std::size_t k = 1; k <= count; ++k)
      for (std::size_t j = 0; j < input_counts[k]; ++j) last[sources[k][j]] = std::max(last[sources[k][j]], k);
    return last;
  }();
  // An in-place node that is its source's only reader works in its source's
  // buffer: nothing to copy.
  static constexpr auto shares_source_buffer = [] {
    std::array<bool, count + 1> shares{};
    for (std::size_t k = 1; k <= count; ++k)
      shares[k] = in_place[k] && !is_merge[k] && input_counts[k] == 1 && sources[k][0] != 0 &&
                  !is_input_node[sources[k][0]] && reader_count[sources[k][0]] == 1;
    return shares;
  }();
  // Node k's gradient buffer: its own (k), the graph's d_out (the last node,
  // when it does not work in place), or, following shares_source_buffer down,
  // the buffer of the first node of the run.
  static constexpr std::size_t external_gradient = detail::no_node, no_gradient = detail::no_node - 1;
  static constexpr auto gradient_buffer = [] {
    std::array<std::size_t, count + 1> buffer{};
    for (std::size_t k = 1; k <= count; ++k) buffer[k] = is_input_node[k] ? no_gradient : k;
    buffer[count] = in_place[count] ? count : external_gradient;
    // A run k1 <- k2 <- ... (each sharing its source's buffer) uses the
    // buffer of its top node; resolve from the top down.
    for (std::size_t k = count; k >= 1; --k)
      if (shares_source_buffer[k]) buffer[sources[k][0]] = buffer[k];
    return buffer;
  }();
  // Each buffer's life in backward steps: from the step of its first writer
  // (the highest node using it or reading into it) down to the lowest node
  // whose backward reads it.
  static constexpr auto buffer_life = [] {
    std::array<std::array<std::size_t, 2>, count + 1> life{};  // [low, high]; high 0: unused
    for (std::size_t k = 1; k <= count; ++k) {
      const std::size_t b = gradient_buffer[k];
      if (b == external_gradient || b == no_gradient) continue;
      const std::size_t high = std::max(k, last_reader[k]);
      if (life[b][1] == 0) life[b] = {k, high};
      life[b][0] = std::min(life[b][0], k);
      life[b][1] = std::max(life[b][1], high);
    }
    return life;
  }();
  static constexpr auto buffer_bytes = [] {
    std::array<std::size_t, count + 1> bytes{};
    for (std::size_t k = 1; k <= count; ++k) {
      const std::size_t b = gradient_buffer[k];
      if (b != external_gradient && b != no_gradient) bytes[b] = std::max(bytes[b], align_up(out_sizes[k] * sizeof(float)));
    }
    return bytes;
  }();
  // First fit, per sample: buffers in the order they come alive (highest
  // first), each at the lowest offset clear of every buffer whose life
  // overlaps its own. Per-sample sizes are multiples of 64 bytes, so every
  // offset times the batch stays aligned.
  static constexpr auto gradient_offset = [] {
    std::array<std::size_t, count + 1> offset{};
    std::array<bool, count + 1> placed{};
    for (std::size_t high = count; high >= 1; --high) {
      for (std::size_t b = 1; b <= count; ++b) {
        if (buffer_life[b][1] != high || buffer_bytes[b] == 0) continue;
        std::size_t at = 0;
        for (bool moved = true; moved;) {
          moved = false;
          for (std::size_t o = 1; o <= count; ++o) {
            if (!placed[o]) continue;
            const bool overlap = buffer_life[o][0] <= buffer_life[b][1] && buffer_life[b][0] <= buffer_life[o][1];
            const bool clash = at < offset[o] + buffer_bytes[o] && offset[o] < at + buffer_bytes[b];
            if (overlap && clash) {
              at = offset[o] + buffer_bytes[o];
              moved = true;
            }
          }
        }
        offset[b] = at;
        placed[b] = true;
      }
    }
    return offset;
  }();
  static constexpr std::size_t gradient_area_per_sample = [] {
    std::size_t end = 0;
    for (std::size_t b = 1; b <= count; ++b) end = std::max(end, gradient_offset[b] + buffer_bytes[b]);
    return end;
  }();
  // The spare buffer, for the readers that add rather than write.
  static constexpr std::size_t spare_per_sample = [] {
    std::size_t bytes = 0;
    for (std::size_t k = 1; k <= count; ++k)
      for (std::size_t j = 0; j < input_counts[k]; ++j)
        if (!edge_writes[k][j] && !is_input_node[sources[k][j]])
          bytes = std::max(bytes, align_up(out_sizes[sources[k][j]] * sizeof(float)));
    return bytes;
  }();
  // The spare parameter gradient for shared<> uses but the first to run backward.
  static constexpr auto shared_writes = [] {
    std::array<bool, count + 1> writes{};
    std::array<bool, count + 1> written{};
    for (std::size_t k = count; k >= 1; --k) {
      const std::size_t owner = shared_with[k] == detail::no_node ? k : shared_with[k];
      writes[k] = !written[owner];
      written[owner] = true;
    }
    return writes;
  }();
  static constexpr std::size_t spare_gradient_floats = [] {
    auto floats = per_node([]<class L>() { return L::params::floats; });
    std::size_t most = 0;
    for (std::size_t k = 1; k <= count; ++k)
      if (!shared_writes[k]) most = std::max(most, floats[k]);
    return most;
  }();

  // The kept region: each node's own output buffer and workspace.
  static constexpr std::size_t kept_per_sample = [] {
    std::size_t sum = 0;
    for (std::size_t k = 1; k <= count; ++k) {
      if (output_home[k] == k) sum += align_up(out_bytes[k]);
      sum += align_up(ws_per_sample[k]);
    }
    return sum;
  }();
  static constexpr std::size_t kept_per_step = [] {
    std::size_t sum = 0;
    for (std::size_t k = 1; k <= count; ++k) sum += ws_per_step[k] + 2 * arena_alignment;
    return sum;
  }();
  static constexpr std::size_t largest_child_scratch_per_sample = [] {
    std::size_t m = 0;
    for (auto s : child_scratch_per_sample) m = std::max(m, s);
    return m;
  }();
  static constexpr std::size_t largest_child_scratch_per_step = [] {
    std::size_t m = 0;
    for (auto s : child_scratch_per_step) m = std::max(m, s);
    return m;
  }();
  static constexpr std::size_t workspace_bytes_per_sample = kept_per_sample;
  static constexpr std::size_t workspace_bytes_per_step = kept_per_step;
  static constexpr std::size_t scratch_bytes_per_sample =
      gradient_area_per_sample + spare_per_sample + largest_child_scratch_per_sample;
  static constexpr std::size_t scratch_bytes_per_step =
      align_up(spare_gradient_floats * sizeof(float)) + largest_child_scratch_per_step + 4 * arena_alignment;

  // Parameters: each declaring node's, in order, named after the node
  // ("conv1.kernel", "block.dense_1.kernel" for a block's). Inside another
  // combinator the graph is one leaf, named like any child ("graph.conv1.kernel").
 private:
  template <std::size_t K>
  static auto named_params_of() {
    if constexpr (K == 0 || shared_with[K] != detail::no_node) {
      return std::type_identity<param_list<>>{};
    } else {
      using inner = typename detail::name_leaves<typename node_at<K>::params>::type;
      return std::type_identity<typename detail::prefix_names<inner, detail::node_name_part<node_type<K>>>::type>{};
    }
  }
  template <class List>
  struct as_one_leaf;
  template <class... Ps>
  struct as_one_leaf<param_list<Ps...>> {
    using type = param_list<leaf_param<Ps, detail::graph_scope, 0>...>;
  };

 public:
  using named = typename decltype([]<std::size_t... K>(std::index_sequence<K...>) {
    return std::type_identity<
        typename detail::concat_param_lists<typename decltype(named_params_of<K>())::type...>::type>{};
  }(std::make_index_sequence<count + 1>{}))::type;
  static constexpr std::string_view scope_name = "graph";
  static constexpr std::size_t leaf_count = named::count > 0 ? 1 : 0;
  using params = std::conditional_t<Context::nested, typename as_one_leaf<named>::type, named>;
};

template <class... Nodes>
struct graph {
  static std::string type_name() { return "graph<" + std::to_string(sizeof...(Nodes)) + " nodes>"; }
  static constexpr std::string_view scope_name = "graph";
  template <class In, class Context>
  struct bind : graph_binding<Context, In, false, Nodes...> {};
};

namespace detail {
// functional<>'s body: a graph whose tensors are named by their nodes alone
// ("conv1.kernel"), since the graph is the whole network.
template <bool NamedInputs, class... Nodes>
struct functional_body : graph<Nodes...> {
  template <class In, class Context>
  struct bind : graph_binding<Context, In, NamedInputs, Nodes...> {
    static constexpr bool absolute_names = true;
  };
};
}  // namespace detail

}  // namespace typeflow

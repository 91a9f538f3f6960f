// The rules a graph's nodes obey (model/graph.hpp), one static_assert each,
// stated with the node: graph_check<node<...>, given<...>, false>::passed in
// the note under the error names it and what it reads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <tuple>
#include <type_traits>

#include "typeflow/model/graph_nodes.hpp"

namespace typeflow::detail {

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

}  // namespace typeflow::detail

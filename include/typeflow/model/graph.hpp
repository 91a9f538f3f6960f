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

#include "typeflow/model/graph_checks.hpp"
#include "typeflow/model/graph_nodes.hpp"

namespace typeflow {

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

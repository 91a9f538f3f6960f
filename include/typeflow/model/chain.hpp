// chain_binding: several layers run as one, inside a combinator.
//
// residual<Layers...>, recompute<Layers...>, repeat<N, Block> and a nested
// sequential<Layers...> (one without an input) all bind their children the
// way a network does: each child gets the previous child's output shape and
// its own context (nested_context: its siblings as neighbours; its dropout
// salt comes at run time, layer_io::salt). The chain then lays out, inside the one workspace and the
// one scratch region a layer gets from the model's memory plan:
//
//   kept       each child's output (except where it aliases its input, and the
//              last child's, which is the combinator's output buffer) and each
//              child's workspace: what the children keep from forward to
//              backward. Recompute = true puts these in the scratch region
//              instead, and backward re-runs the children's forward first:
//              the activations are not kept, they are recomputed (except in
//              a decoder, whose attention caches must outlast each call).
//   transient  three gradient buffers the children's backward passes
//              alternate between, then the children's own scratch
//              (always in the scratch region).
//
// Parameter names: a leaf layer inside a combinator is named the way Keras
// names layers, by kind and occurrence within the outermost combinator
// ("layer_norm", "layer_norm_1", "attn", "dense", "dense_1"), so a block's
// tensors read "blocks.3.attn.qkv.kernel". Until that outermost combinator
// names them, they travel as leaf_param (kind, leaf index).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "typeflow/core/fixed_string.hpp"
#include "typeflow/contract/layer.hpp"
#include "typeflow/layers/input.hpp"

namespace typeflow {

// A leaf layer's name inside a combinator: its spec's scope_name, or "layer".
template <class Spec>
struct scope_name_of {
  static constexpr std::string_view value = "layer";
};
template <class Spec>
  requires requires { Spec::scope_name; }
struct scope_name_of<Spec> {
  static constexpr std::string_view value = Spec::scope_name;
};

// A parameter of leaf number Leaf (of kind Scope) inside a combinator, not yet named.
template <class P, class Scope, std::size_t Leaf>
struct leaf_param : P {
  using base_param = P;
  using scope = Scope;
  static constexpr std::size_t leaf = Leaf;
};
// A parameter with its name inside the outermost combinator.
template <class P, class Name>
struct named_param : P {
  static constexpr std::string_view name = Name::value;
};

namespace detail {

template <class P>
inline constexpr bool is_leaf_param = false;
template <class P, class S, std::size_t L>
inline constexpr bool is_leaf_param<leaf_param<P, S, L>> = true;

template <class P>
struct current_name {
  static constexpr std::string_view value = P::name;
};

// A child's parameter as seen by its parent chain: leaves renumbered after
// the leaves of the children before it; a plain layer's parameters become
// the parameters of one new leaf; named ones pass through.
template <class P, class Spec, std::size_t LeafBase>
struct as_leaf {
  using type = leaf_param<P, scope_name_of<Spec>, LeafBase>;
};
template <class P, class S, std::size_t L, class Spec, std::size_t LeafBase>
struct as_leaf<leaf_param<P, S, L>, Spec, LeafBase> {
  using type = leaf_param<P, S, L + LeafBase>;
};
template <class P, class N, class Spec, std::size_t LeafBase>
struct as_leaf<named_param<P, N>, Spec, LeafBase> {
  using type = named_param<P, N>;
};

template <class List, class Spec, std::size_t LeafBase>
struct leaves_of;
template <class... Ps, class Spec, std::size_t LeafBase>
struct leaves_of<param_list<Ps...>, Spec, LeafBase> {
  using type = param_list<typename as_leaf<Ps, Spec, LeafBase>::type...>;
};

template <class... Lists>
struct concat_param_lists {
  using type = param_list<>;
};
template <class... A>
struct concat_param_lists<param_list<A...>> {
  using type = param_list<A...>;
};
template <class... A, class... B, class... Rest>
struct concat_param_lists<param_list<A...>, param_list<B...>, Rest...> {
  using type = typename concat_param_lists<param_list<A..., B...>, Rest...>::type;
};

// Names every leaf parameter of a list: "<kind>[_<occurrence>].<name>".
template <class List>
struct name_leaves;
template <class... Ps>
struct name_leaves<param_list<Ps...>> {
  static constexpr std::size_t count = sizeof...(Ps);
  static constexpr std::array<bool, count + 1> is_leaf{is_leaf_param<Ps>..., false};
  template <class P>
  static constexpr std::string_view scope_of() {
    if constexpr (is_leaf_param<P>)
      return P::scope::value;
    else
      return {};
  }
  template <class P>
  static constexpr std::size_t leaf_of() {
    if constexpr (is_leaf_param<P>)
      return P::leaf;
    else
      return 0;
  }
  static constexpr std::array<std::string_view, count + 1> scopes{scope_of<Ps>()..., {}};
  static constexpr std::array<std::size_t, count + 1> leaves{leaf_of<Ps>()..., 0};
  // How many distinct leaves of the same kind come before parameter K's leaf.
  static constexpr std::size_t occurrence(std::size_t k) {
    std::size_t seen = 0;
    for (std::size_t j = 0; j < k; ++j) {
      if (!is_leaf[j] || scopes[j] != scopes[k] || leaves[j] == leaves[k]) continue;
      if (j == 0 || !is_leaf[j - 1] || leaves[j - 1] != leaves[j]) ++seen;
    }
    return seen;
  }
  template <class P, std::size_t K>
  struct named {
    using type = P;
  };
  template <class P, class S, std::size_t L, std::size_t K>
  struct named<leaf_param<P, S, L>, K> {
    using type = named_param<P, joined_name<occurrence_name<S, occurrence(K)>, current_name<P>>>;
  };
  template <std::size_t... K>
  static auto make(std::index_sequence<K...>) -> param_list<typename named<Ps, K>::type...>;
  using type = decltype(make(std::make_index_sequence<count>{}));
};

// A list's parameters made frozen (frozen<...>), wrapped inside their naming
// wrappers so that the names are still made as for any child's.
template <class P>
struct freeze {
  using type = frozen_param<P>;
};
template <class P, class S, std::size_t L>
struct freeze<leaf_param<P, S, L>> {
  using type = leaf_param<typename freeze<P>::type, S, L>;
};
template <class P, class N>
struct freeze<named_param<P, N>> {
  using type = named_param<typename freeze<P>::type, N>;
};
template <class List>
struct freeze_all;
template <class... Ps>
struct freeze_all<param_list<Ps...>> {
  using type = param_list<typename freeze<Ps>::type...>;
};

// Every name of a list prefixed with Parts... ("blocks", "3").
template <class List, class... Parts>
struct prefix_names;
template <class... Ps, class... Parts>
struct prefix_names<param_list<Ps...>, Parts...> {
  using type = param_list<named_param<Ps, joined_name<Parts..., current_name<Ps>>>...>;
};

// "a, b, c": the children's type names, for a combinator's type_name().
template <class... Specs>
std::string type_names() {
  std::string names;
  ((names += (names.empty() ? "" : ", ") + Specs::type_name()), ...);
  return names;
}

template <class Bound>
constexpr std::size_t leaf_count_of() {
  if constexpr (requires { Bound::leaf_count; })
    return Bound::leaf_count;
  else
    return Bound::params::count > 0 ? 1 : 0;
}

// As the first child's Previous: the children see no neighbours (void on
// both sides), so that repeat's copies, which differ only in them, bind as
// one type. Combinators never look at their neighbours; a repeated leaf
// layer (dense, an activation) gives up fusing with its copies, which it
// could not do anyway.
struct isolated_children;

// Binds Specs one after another from In, each with its nested context. The
// children compute in the outer context's compute dtype; a child stores its
// output in 16 bits when the siblings after it read 16 bits (the combinator's
// own output is float32, as every layer that is not element-wise reads it).
template <class Outer, class In, std::size_t I, class Previous, class InDtype, class Siblings, class... Specs>
struct bind_children {
  using type = std::tuple<>;
};
template <class Outer, class In, std::size_t I, class Previous, class InDtype, class Siblings, class Spec,
          class... Rest>
struct bind_children<Outer, In, I, Previous, InDtype, Siblings, Spec, Rest...> {
  static constexpr bool isolated = std::is_same_v<Previous, isolated_children>;
  using next = typename std::conditional_t<(sizeof...(Rest) > 0 && !isolated),
                                           std::tuple_element<0, std::tuple<Rest..., void>>,
                                           std::type_identity<void>>::type;
  using compute = typename Outer::precision::compute;
  using precision = layer_precision<compute, InDtype,
                                    !std::is_same_v<compute, float32> && reads_16bit_from<Siblings, I + 1>()>;
  using bound = typename Spec::template bind<
      In, nested_context<Outer, std::conditional_t<isolated, void, Previous>, next, precision>>;
  using type = decltype(std::tuple_cat(
      std::declval<std::tuple<bound>>(),
      std::declval<typename bind_children<Outer, typename bound::output_shape, I + 1,
                                          std::conditional_t<isolated, isolated_children, Spec>,
                                          typename bound::output_dtype, Siblings, Rest...>::type>()));
};

}  // namespace detail

// The bound facts and the executor of Specs... run as a chain from In.
// FirstPrevious is what the first child sees before it: void (the children
// of a combinator see only their siblings), for frozen<...> at the start of a
// network the network's input (an embedding checks that it reads token ids),
// or detail::isolated_children (repeat: no neighbours at all).
template <class Context, class In, bool Recompute, class FirstPrevious, class... Specs>
struct chain_binding_after : layer_defaults {
  // Its executor is chain_executor (model/chain_executor.hpp), on every device.
  static constexpr bool is_chain = true;
  // A decoder keeps everything: attention's key/value cache lives in its
  // workspace and must outlast the call, so recompute does not apply there.
  static constexpr bool Kept = !Recompute || Context::decode_length > 0;
  static_assert(sizeof...(Specs) > 0, "a combinator needs at least one layer inside it");
  using children =
      typename detail::bind_children<Context, In, 0, FirstPrevious, typename Context::precision::input,
                                     std::tuple<Specs...>, Specs...>::type;
  static constexpr std::size_t n = sizeof...(Specs);
  template <std::size_t I>
  using child = std::tuple_element_t<I, children>;
  template <std::size_t I>
  using child_spec = std::tuple_element_t<I, std::tuple<Specs...>>;

  using input_shape = In;
  using output_shape = typename child<n - 1>::output_shape;

 private:
  template <class F>
  static constexpr auto per_child(F f) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::array{f.template operator()<child<I>>()...};
    }(std::make_index_sequence<n>{});
  }

 public:
  static constexpr auto out_sizes = per_child([]<class L>() { return L::output_shape::size; });
  // Bytes of each child's stored output per sample (2 an element in 16 bits).
  static constexpr auto out_bytes =
      per_child([]<class L>() { return L::output_shape::size * sizeof(typename L::output_dtype::value_type); });
  // What the combinator reports as its compute dtype: the policy's when some
  // child computes in 16 bits.
  using compute_dtype = std::conditional_t<
      []<std::size_t... I>(std::index_sequence<I...>) {
        return (!std::is_same_v<typename std::tuple_element_t<I, children>::compute_dtype, float32> || ...);
      }(std::make_index_sequence<n>{}),
      typename Context::precision::compute, float32>;
  static_assert(std::is_same_v<typename child<n - 1>::output_dtype, float32>,
                "a combinator's last layer hands on float32");
  static constexpr auto aliases = per_child([]<class L>() { return L::output_aliases_input; });
  static constexpr auto in_place = per_child([]<class L>() { return L::gradient_in_place; });
  static constexpr auto child_ws_per_sample = per_child([]<class L>() { return L::workspace_bytes_per_sample; });
  static constexpr auto child_ws_per_step = per_child([]<class L>() { return L::workspace_bytes_per_step; });
  static constexpr auto child_scratch_per_sample = per_child([]<class L>() { return L::scratch_bytes_per_sample; });
  static constexpr auto child_scratch_per_step = per_child([]<class L>() { return L::scratch_bytes_per_step; });
  static constexpr auto child_param_floats = per_child([]<class L>() { return L::params::floats; });
  static constexpr auto child_frozen_floats = per_child([]<class L>() { return L::params::frozen_floats; });
  static constexpr auto child_flops = per_child([]<class L>() { return L::flops_per_sample; });

  static constexpr bool all_alias = [] {
    for (bool a : aliases)
      if (!a) return false;
    return true;
  }();
  static constexpr bool output_aliases_input = all_alias;
  static constexpr std::size_t flops_per_sample = [] {
    std::size_t sum = 0;
    for (auto f : child_flops) sum += f;
    return sum;
  }();

  // Where child i writes its output: io.in (all before it alias), io.out
  // (the last child that computes, and the aliasing ones after it), or its
  // own kept buffer.
  static constexpr int from_input = -1, to_output = -2;
  static constexpr auto output_slot = [] {
    std::array<int, n> slot{};
    std::size_t last = n;  // the last child that does not alias
    for (std::size_t i = 0; i < n; ++i)
      if (!aliases[i]) last = i;
    for (std::size_t i = 0; i < n; ++i) {
      if (last < n && i >= last)
        slot[i] = to_output;
      else if (aliases[i])
        slot[i] = i == 0 ? from_input : slot[i - 1];
      else
        slot[i] = static_cast<int>(i);
    }
    return slot;
  }();

  // Which buffer holds d(loss)/d(output of child i): one of three own
  // buffers (0, 1, 2), io.d_out (the last child's, unless it works in place:
  // io.d_out is read-only to the chain, so it is copied to buffer 0 first) or
  // io.d_in (a leading run of in-place children).
  static constexpr int external_out = -1, external_in = -2;
  static constexpr auto gradient_slot = [] {
    std::array<int, n> slot{};
    slot[n - 1] = in_place[n - 1] ? 0 : external_out;
    for (std::size_t i = n - 1; i > 0; --i)
      slot[i - 1] = in_place[i] ? slot[i] : (slot[i] == 0 ? 1 : 0);
    for (std::size_t i = 0; i < n && in_place[i]; ++i) slot[i] = external_in;
    return slot;
  }();

  // Bytes per sample and per step of the kept part and the transient part.
  static constexpr std::size_t largest_output = [] {
    std::size_t m = 0;
    for (auto s : out_sizes) m = std::max(m, s);
    return m;
  }();
  static constexpr std::size_t kept_regions = 2 * n;
  static constexpr std::size_t kept_per_sample = [] {
    std::size_t sum = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (output_slot[i] == static_cast<int>(i)) sum += out_bytes[i];
      sum += child_ws_per_sample[i];
    }
    return sum;
  }();
  static constexpr std::size_t kept_per_step = [] {
    std::size_t sum = kept_regions * arena_alignment;
    for (auto s : child_ws_per_step) sum += s;
    return sum;
  }();
  static constexpr std::size_t transient_per_sample = [] {
    std::size_t m = 0;
    for (auto s : child_scratch_per_sample) m = std::max(m, s);
    return 3 * largest_output * sizeof(float) + m;
  }();
  static constexpr std::size_t transient_per_step = [] {
    std::size_t m = 0;
    for (auto s : child_scratch_per_step) m = std::max(m, s);
    return 4 * arena_alignment + m;
  }();

  static constexpr std::size_t workspace_bytes_per_sample = Kept ? kept_per_sample : 0;
  static constexpr std::size_t workspace_bytes_per_step = Kept ? kept_per_step : 0;
  static constexpr std::size_t scratch_bytes_per_sample = transient_per_sample + (Kept ? 0 : kept_per_sample);
  static constexpr std::size_t scratch_bytes_per_step = transient_per_step + (Kept ? 0 : kept_per_step);

  // Parameters: the children's, in order, as unnamed leaves; the outermost
  // combinator names them.
  static constexpr auto child_leaf_counts = per_child([]<class L>() { return detail::leaf_count_of<L>(); });
  static constexpr std::size_t leaf_count = [] {
    std::size_t sum = 0;
    for (auto c : child_leaf_counts) sum += c;
    return sum;
  }();
  template <std::size_t I>
  static constexpr std::size_t leaves_before = [] {
    std::size_t sum = 0;
    for (std::size_t i = 0; i < I; ++i) sum += child_leaf_counts[i];
    return sum;
  }();
  using leaves = decltype([]<std::size_t... I>(std::index_sequence<I...>) {
    return std::type_identity<typename detail::concat_param_lists<
        typename detail::leaves_of<typename child<I>::params, child_spec<I>, leaves_before<I>>::type...>::type>{};
  }(std::make_index_sequence<n>{}))::type;
  using params = std::conditional_t<Context::nested, leaves, typename detail::name_leaves<leaves>::type>;
};

template <class Context, class In, bool Recompute, class... Specs>
using chain_binding = chain_binding_after<Context, In, Recompute, void, Specs...>;

// What the first child of a block sees before it: the network's (or a graph
// node's) input when the block comes right after one, so that an embedding
// first inside a block reads token ids as it would outside (frozen<...>,
// sequential<...> as a block); else nothing.
template <class Context>
using input_before_block = std::conditional_t<is_input_v<typename Context::previous>, typename Context::previous, void>;

}  // namespace typeflow

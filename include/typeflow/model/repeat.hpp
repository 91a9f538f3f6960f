// repeat<N, Layers...>: N copies of a block, each with its own parameters.
//
//   repeat<6, recompute<block>>   six blocks, their activations recomputed
//
// The copies run one after another, so the block must keep its input's
// shape. Parameters are named per copy, "blocks.<copy>.<layer>.<name>"
// (e.g. blocks.3.attn.qkv.kernel), where <layer> is the Keras-style name of
// a layer inside the block (attn, layer_norm, layer_norm_1, dense, dense_1).
#pragma once

#include <string>
#include <type_traits>
#include <utility>

#include "typeflow/model/chain.hpp"
#include "typeflow/model/chain_executor.hpp"

namespace typeflow {

template <class... Layers>
struct sequential;

namespace detail {
struct blocks_name {
  static constexpr std::string_view value = "blocks";
};
template <class Block, class Sequence>
struct repeat_chain;
template <class Block, std::size_t... I>
struct repeat_chain<Block, std::index_sequence<I...>> {
  template <std::size_t>
  using copy = Block;
  // The copies see no neighbours, so that they are one bound type (their
  // executors tell them apart at run time, by layer_io::salt).
  template <class Context, class In>
  using type = chain_binding_after<Context, In, false, isolated_children, copy<I>...>;
};
}  // namespace detail

template <int N, class... Layers>
struct repeat {
  // One layer is repeated as it is; several form a block (a nested sequential).
  using block = std::conditional_t<sizeof...(Layers) == 1, std::tuple_element_t<0, std::tuple<Layers..., void>>,
                                   sequential<Layers...>>;

  static std::string type_name() { return "repeat<" + std::to_string(N) + ", " + block::type_name() + ">"; }

  template <class In, class Context>
  struct bind : detail::repeat_chain<block, std::make_index_sequence<(N > 0 ? N : 1)>>::template type<Context, In> {
    using chain = typename detail::repeat_chain<block, std::make_index_sequence<(N > 0 ? N : 1)>>::template type<Context, In>;
    static_assert(layer_check<layer_at<Context::position, repeat>, given<In>, (N > 0)>::passed,
                  "repeat<N, Block>: N, the number of copies, must be positive");
    static_assert(layer_check<layer_at<Context::position, repeat>, given<In, typename chain::template child<0>::output_shape>,
                              std::is_same_v<typename chain::template child<0>::output_shape, In>>::passed,
                  "repeat<N, Block>: the block must keep its input's shape, since each copy feeds the next "
                  "(see both shapes in the note below)");

    // Each copy's parameters named within the copy, then prefixed "blocks.<copy>".
    template <std::size_t I>
    using copy_params = typename detail::prefix_names<
        typename detail::name_leaves<typename detail::leaves_of<typename chain::template child<I>::params,
                                                                 block, 0>::type>::type,
        detail::blocks_name, number_name<I>>::type;
    using params = decltype([]<std::size_t... I>(std::index_sequence<I...>) {
      return std::type_identity<typename detail::concat_param_lists<copy_params<I>...>::type>{};
    }(std::make_index_sequence<(N > 0 ? N : 1)>{}))::type;
    static constexpr std::size_t leaf_count = 0;  // named already
    // At the top of a network the names are whole ("blocks.3...."), not "layers.<i>.blocks.3....".
    static constexpr bool absolute_names = !Context::nested;
  };
};

}  // namespace typeflow

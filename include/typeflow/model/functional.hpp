// functional<input<...>, Nodes...>: a network written as a graph, Keras's
// functional API with the graph checked by the compiler.
//
//   using net = tf::functional<tf::input<28, 28, 1>,
//       tf::node<"conv", tf::conv2d<16, 3, tf::relu>, "input">,
//       tf::node<"block", tf::sequential<tf::conv2d<16, 3, tf::relu, tf::same>, tf::conv2d<16, 3, tf::same>>, "conv">,
//       tf::node<"sum", tf::add, "block", "conv">,
//       tf::node<"pooled", tf::global_average_pooling2d, "sum">,
//       tf::node<"logits", tf::dense<10>, "pooled">>;
//
// It is a network like sequential<input, graph<Nodes...>> (model/graph.hpp
// has the rules and the memory plan), so everything a sequential network
// does (policies, strategies, both devices, checkpoints) it does too; its
// parameters are named after the nodes ("conv.kernel", "block.conv2d_1.bias").
#pragma once

#include "typeflow/layers/input.hpp"
#include "typeflow/layers/merge.hpp"
#include "typeflow/model/graph.hpp"
#include "typeflow/model/graph_executor.hpp"
#include "typeflow/model/sequential.hpp"

namespace typeflow {

template <class Input, class... Nodes>
struct functional : detail::network_sequential<Input, detail::functional_body<Nodes...>> {
  static_assert(is_input_v<Input>, "functional<Input, Nodes...>: the first argument is the input, e.g. input<28, 28, 1>");
};

template <class Input, class... Nodes>
inline constexpr bool is_sequential_v<functional<Input, Nodes...>> = true;

}  // namespace typeflow

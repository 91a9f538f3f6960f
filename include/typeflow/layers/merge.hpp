// Merge layers: one output from several nodes of a graph (model/graph.hpp),
// Keras's merging layers.
//
//   add, subtract, multiply, average, maximum, minimum
//                    element-wise over inputs of one shape (subtract: exactly two)
//   concatenate<Axis> inputs equal but along Axis (default the last), joined along it
//   dot              two (N) vectors per sample -> (1): their inner product
//
// A merge is not a one-input layer: a graph binds it with its inputs' shapes
// (merge_binding below) and runs it with merge_executor
// (model/merge_executor.hpp), written once for every device. It has no
// parameters, and reads and writes float32.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "typeflow/core/shape.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {

// pack is functional<>'s own: its outputs, each flattened, side by side in
// one (B, sum of sizes) buffer, which the model's loss reads.
enum class merge_op { add, subtract, multiply, average, maximum, minimum, concatenate, dot, pack };

template <merge_op Op, int Axis = -1>
struct merge_layer {
  static constexpr merge_op op = Op;
  static constexpr int axis = Axis;
  static constexpr std::string_view scope_name = [] {
    switch (Op) {
      case merge_op::add: return "add";
      case merge_op::subtract: return "subtract";
      case merge_op::multiply: return "multiply";
      case merge_op::average: return "average";
      case merge_op::maximum: return "maximum";
      case merge_op::minimum: return "minimum";
      case merge_op::concatenate: return "concatenate";
      case merge_op::dot: return "dot";
      case merge_op::pack: return "outputs";
    }
    return "merge";
  }();
  static std::string type_name() {
    std::string name(scope_name);
    if (Op == merge_op::concatenate && Axis != -1) name += "<" + std::to_string(Axis) + ">";
    return name;
  }
};

using add = merge_layer<merge_op::add>;
using subtract = merge_layer<merge_op::subtract>;
using multiply = merge_layer<merge_op::multiply>;
using average = merge_layer<merge_op::average>;
using maximum = merge_layer<merge_op::maximum>;
using minimum = merge_layer<merge_op::minimum>;
template <int Axis = -1>
using concatenate = merge_layer<merge_op::concatenate, Axis>;
using dot = merge_layer<merge_op::dot>;
namespace detail {
using pack_outputs = merge_layer<merge_op::pack>;
}

template <class T>
inline constexpr bool is_merge_v = false;
template <merge_op Op, int Axis>
inline constexpr bool is_merge_v<merge_layer<Op, Axis>> = true;
template <class T>
inline constexpr bool is_pack_v = std::is_same_v<T, detail::pack_outputs>;

namespace detail {

template <class... Shapes>
constexpr bool same_shapes() {
  using first = std::tuple_element_t<0, std::tuple<Shapes...>>;
  return (std::is_same_v<first, Shapes> && ...);
}

// Concatenation along a normalised axis: (outer, dim, inner) per input.
template <int Axis, class... Shapes>
struct concatenation {
  using first = std::tuple_element_t<0, std::tuple<Shapes...>>;
  static constexpr int rank = first::rank;
  static constexpr bool same_rank = ((Shapes::rank == rank) && ...);
  static constexpr int axis = Axis < 0 ? rank + Axis : Axis;
  static constexpr bool axis_ok = same_rank && axis >= 0 && axis < rank;
  // Every dimension but the axis agrees.
  static constexpr bool fits = [] {
    if constexpr (!axis_ok) {
      return false;
    } else {
      for (int d = 0; d < rank; ++d) {
        if (d == axis) continue;
        if (((Shapes::dims[static_cast<std::size_t>(d)] != first::dims[static_cast<std::size_t>(d)]) || ...))
          return false;
      }
      return true;
    }
  }();
  static constexpr std::array<int, sizeof...(Shapes)> along = [] {
    if constexpr (axis_ok)
      return std::array<int, sizeof...(Shapes)>{Shapes::dims[static_cast<std::size_t>(axis)]...};
    else
      return std::array<int, sizeof...(Shapes)>{};
  }();
  static constexpr int total = [] {
    int sum = 0;
    for (int d : along) sum += d;
    return sum;
  }();
  // Elements per sample after the axis, and rows per sample before it.
  static constexpr std::size_t inner = [] {
    std::size_t n = 1;
    if constexpr (axis_ok)
      for (int d = axis + 1; d < rank; ++d) n *= static_cast<std::size_t>(first::dims[static_cast<std::size_t>(d)]);
    return n;
  }();
  static constexpr std::size_t outer = [] {
    std::size_t n = 1;
    if constexpr (axis_ok)
      for (int d = 0; d < axis; ++d) n *= static_cast<std::size_t>(first::dims[static_cast<std::size_t>(d)]);
    return n;
  }();
  template <std::size_t... I>
  static auto make(std::index_sequence<I...>)
      -> shape<(static_cast<int>(I) == axis ? total : first::dims[I])...>;
  using output_shape = std::conditional_t<fits, decltype(make(std::make_index_sequence<rank>{})), first>;
};

}  // namespace detail

// A merge's facts over its inputs' shapes Ins..., with whether they fit
// (the graph states the rule, naming the node, when they do not).
template <class Spec, class... Ins>
struct merge_binding : layer_defaults {
  static constexpr merge_op op = Spec::op;
  static constexpr std::size_t inputs = sizeof...(Ins);
  static constexpr bool count_ok = (op == merge_op::subtract || op == merge_op::dot) ? inputs == 2
                                   : op == merge_op::pack                            ? inputs >= 1
                                                                                     : inputs >= 2;
  static constexpr bool elementwise = op != merge_op::concatenate && op != merge_op::dot;
  using concat = detail::concatenation<Spec::axis, Ins...>;
  using first = std::tuple_element_t<0, std::tuple<Ins...>>;
  static constexpr bool shapes_ok = [] {
    if constexpr (op == merge_op::pack) return true;
    else if constexpr (op == merge_op::concatenate) return concat::fits;
    else if constexpr (op == merge_op::dot) return detail::same_shapes<Ins...>() && first::rank == 1;
    else return detail::same_shapes<Ins...>();
  }();
  using input_shapes = std::tuple<Ins...>;
  static constexpr std::array<std::size_t, sizeof...(Ins)> input_sizes{Ins::size...};
  static constexpr std::size_t total_size = (Ins::size + ...);
  using output_shape = std::conditional_t<
      op == merge_op::pack, std::conditional_t<(inputs == 1), first, shape<static_cast<int>(total_size)>>,
      std::conditional_t<op == merge_op::concatenate, typename concat::output_shape,
                         std::conditional_t<op == merge_op::dot, shape<1>, first>>>;
  // concatenate and pack place rows: input j's rows of part_floats[j]
  // floats at part_offsets[j] within rows of whole_floats, `rows` per sample.
  static constexpr std::array<std::size_t, sizeof...(Ins)> part_floats = [] {
    std::array<std::size_t, sizeof...(Ins)> floats = input_sizes;
    if constexpr (op != merge_op::pack)
      for (std::size_t j = 0; j < floats.size(); ++j)
        floats[j] = static_cast<std::size_t>(concat::along[j]) * concat::inner;
    return floats;
  }();
  static constexpr std::size_t whole_floats = [] {
    std::size_t sum = 0;
    for (std::size_t f : part_floats) sum += f;
    return sum;
  }();
  static constexpr std::array<std::size_t, sizeof...(Ins)> part_offsets = [] {
    std::array<std::size_t, sizeof...(Ins)> at{};
    for (std::size_t j = 1; j < at.size(); ++j) at[j] = at[j - 1] + part_floats[j - 1];
    return at;
  }();
  static constexpr std::size_t rows = op == merge_op::pack ? 1 : concat::outer;
  static constexpr std::size_t flops_per_sample =
      (op == merge_op::concatenate || op == merge_op::pack) ? 0 : (op == merge_op::dot ? 2 * first::size : (inputs - 1) * first::size);
  // maximum and minimum keep, for each element, which input won (as a float).
  static constexpr std::size_t workspace_bytes_per_sample =
      (op == merge_op::maximum || op == merge_op::minimum) ? output_shape::size * sizeof(float) : 0;
};

}  // namespace typeflow

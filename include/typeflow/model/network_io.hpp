// network_io<Net>: a bound network's inputs and outputs, by name, and
// where each lies in the packed input and output buffers.
//
// A sequential network, or a functional<> with one input and one output,
// has one of each: the input is "input", the output "output" (a
// functional<>'s is named after its last node). A functional<> with named
// input nodes takes them packed side by side, (B, sum of input sizes), and
// one with outputs<...> gives them packed the same way (model/functional.hpp);
// the offsets below are in values (4-byte slots) within one sample's row.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "typeflow/core/dtype.hpp"
#include "typeflow/core/host_tensor.hpp"
#include "typeflow/core/shape.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {

namespace detail {
template <class Net>
constexpr bool is_functional_net() {
  if constexpr (Net::layer_count == 2) {
    using body = typename Net::template layer<1>;
    if constexpr (requires { body::is_graph; })
      return body::absolute_names;
    else
      return false;
  } else {
    return false;
  }
}

template <class Shape>
constexpr int classes_of() {
  if constexpr (Shape::rank >= 1)
    return Shape::template dim<-1>;
  else
    return 1;
}
}  // namespace detail

// One part of the packed input or output.
struct io_part {
  std::string_view name;
  std::size_t offset = 0;  // in values within a sample's row
  std::size_t size = 0;    // values per sample
  int classes = 1;         // an output's last axis (a loss reads rows of it)
  bool int32 = false;      // an input of int32 ids
};

template <class Net>
struct network_io {
  static constexpr std::size_t input_count = 1, output_count = 1;
  static constexpr std::array<io_part, 1> inputs{
      io_part{"input", 0, Net::input_shape_type::size, 1, std::is_same_v<typename Net::input_dtype, int32>}};
  static constexpr std::array<io_part, 1> outputs{
      io_part{"output", 0, Net::output_shape_type::size, detail::classes_of<typename Net::output_shape_type>(), false}};
  template <std::size_t J>
  using output_shape = typename Net::output_shape_type;
  // Whether the network takes named inputs packed, and gives several outputs packed.
  static constexpr bool named_inputs = false;
  static constexpr bool packed_outputs = false;
};

template <class Net>
  requires(detail::is_functional_net<Net>())
struct network_io<Net> {
  using graph = typename Net::template layer<1>;
  static constexpr std::size_t input_count = graph::input_node_count, output_count = graph::output_count;
  static constexpr bool named_inputs = graph::names::named_inputs;
  static constexpr bool packed_outputs = graph::packs_outputs && output_count > 1;

  template <std::size_t J>
  using output_shape = typename graph::template node_at<graph::output_nodes[J]>::output_shape;

  static constexpr auto inputs = [] {
    std::array<io_part, input_count> parts{};
    if constexpr (!named_inputs) {
      parts[0] = {"input", 0, Net::input_shape_type::size, 1, std::is_same_v<typename Net::input_dtype, int32>};
    } else {
      [&]<std::size_t... J>(std::index_sequence<J...>) {
        ((parts[J] = io_part{graph::names::names[graph::input_nodes[J]],
                             graph::template node_at<graph::input_nodes[J]>::offset,
                             graph::template node_at<graph::input_nodes[J]>::output_shape::size, 1,
                             std::is_same_v<typename graph::template node_at<graph::input_nodes[J]>::output_dtype, int32>}),
         ...);
      }(std::make_index_sequence<input_count>{});
    }
    return parts;
  }();
  static constexpr auto outputs = [] {
    std::array<io_part, output_count> parts{};
    std::size_t offset = 0;
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      ((parts[J] = io_part{graph::names::names[graph::output_nodes[J]], offset, output_shape<J>::size,
                           detail::classes_of<output_shape<J>>(), false},
        offset += output_shape<J>::size),
       ...);
    }(std::make_index_sequence<output_count>{});
    return parts;
  }();
};

// The output's index by name, or output_count.
template <class Net>
constexpr std::size_t output_index(std::string_view name) {
  for (std::size_t j = 0; j < network_io<Net>::output_count; ++j)
    if (network_io<Net>::outputs[j].name == name) return j;
  return network_io<Net>::output_count;
}

// A shape's extents after a leading `samples`: predict's (samples, shape...).
template <class Shape>
std::vector<std::int64_t> with_samples(std::size_t samples) {
  std::vector<std::int64_t> extents{static_cast<std::int64_t>(samples)};
  for (const int d : Shape::dims) extents.push_back(d);
  return extents;
}

// predict's packed rows (samples, the outputs' sizes side by side) as one
// tensor per output, (samples, its shape), by name.
template <class Net>
std::map<std::string, host_tensor, std::less<>> unpack_outputs(const std::vector<float>& packed) {
  using io = network_io<Net>;
  constexpr std::size_t width = Net::output_shape_type::size;
  const std::size_t samples = packed.size() / width;
  std::map<std::string, host_tensor, std::less<>> out;
  [&]<std::size_t... J>(std::index_sequence<J...>) {
    (
        [&] {
          const io_part& o = io::outputs[J];
          std::vector<float> values(samples * o.size);
          for (std::size_t r = 0; r < samples; ++r)
            std::copy_n(packed.data() + r * width + o.offset, o.size, values.data() + r * o.size);
          out.emplace(std::string(o.name),
                      host_tensor(std::move(values), with_samples<typename io::template output_shape<J>>(samples)));
        }(),
        ...);
  }(std::make_index_sequence<io::output_count>{});
  return out;
}

namespace detail {
// The precision of a layer's results: its compute dtype, unless it says
// otherwise (tied_logits: 16-bit operands, float32 logits).
template <class Layer>
struct result_dtype_of {
  using type = typename Layer::compute_dtype;
};
template <class Layer>
  requires requires { typename Layer::result_dtype; }
struct result_dtype_of<Layer> {
  using type = typename Layer::result_dtype;
};
// The precision of the values the loss receives: the last layer's,
// looking through the layers that pass their input's dtype on (relu after a
// dense receives the dense's rounding).
template <class Net, std::size_t I = Net::layer_count - 1>
struct loss_input_dtype {
  using type = std::conditional_t<
      I == 0 || dtype_flow_of<typename Net::template spec<I>> != dtype_flow::passes_through,
      typename result_dtype_of<typename Net::template layer<I>>::type,
      typename loss_input_dtype<Net, (I > 0 ? I - 1 : 0)>::type>;
};
template <class Net>
struct loss_input_dtype<Net, 0> {
  using type = float32;
};
}  // namespace detail

}  // namespace typeflow

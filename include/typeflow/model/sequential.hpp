// sequential<input<...>, layers...>: a network as a compile-time list.
//
// The list is a Boost.Hana tuple of types. Binding folds over it once: each
// layer receives the previous layer's output shape and its own position and
// neighbours, and yields a bound layer whose facts (output shape, parameters,
// FLOPs, buffer sharing) the memory plan and the train step read. Hana stays
// here, at the type level; nothing it produces runs in a kernel.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <boost/hana.hpp>

#include "typeflow/layers/input.hpp"
#include "typeflow/model/chain.hpp"
#include "typeflow/model/chain_executor.hpp"
#include "typeflow/contract/layer.hpp"
#include "typeflow/precision/policy.hpp"

namespace typeflow {

template <class... Layers>
struct sequential;

namespace detail {

// The input as a bound layer: no work, its output is the batch itself (int32
// token ids are stored in their 4-byte slots of the float buffer as they are).
template <class Input, class Shape = typename Input::shape_type>
struct bound_input : layer_defaults {
  using output_dtype = typename Input::dtype;  // float32 features or int32 token ids
  using input_shape = Shape;
  using output_shape = Shape;
  static constexpr bool computes_nothing = true;  // on every device
};

template <class Tuple, std::size_t I>
using spec_or_void = std::conditional_t<(I < std::tuple_size_v<Tuple>),
                                        std::tuple_element<(I < std::tuple_size_v<Tuple> ? I : 0), Tuple>,
                                        std::type_identity<void>>;

template <int DecodeLength, class InputShape, class Policy, bool Gpu, class... Specs>
struct bind_layers {
  using specs = std::tuple<Specs...>;
  static constexpr std::size_t count = sizeof...(Specs);

  template <std::size_t I>
  using spec_at = std::tuple_element_t<I, specs>;
  template <std::size_t I>
  using next_of = typename spec_or_void<specs, I + 1>::type;

  // Left fold: bound layer I is bind<output shape of bound layer I - 1>.
  static constexpr auto bound = boost::hana::fold_left(
      boost::hana::make_range(boost::hana::size_c<1>, boost::hana::size_c<count>),
      boost::hana::make_tuple(boost::hana::type_c<bound_input<spec_at<0>, InputShape>>),
      [](auto so_far, auto index) {
        constexpr std::size_t I = decltype(index)::value;
        using previous = typename decltype(+boost::hana::back(so_far))::type;
        using spec = spec_at<I>;
        // Under a 16-bit policy a layer may store its output in 16 bits
        // when the layers after it read 16 bits (see layer_precision).
        using precision =
            layer_precision<typename Policy::compute_type, typename previous::output_dtype,
                            !std::is_same_v<typename Policy::compute_type, float32> && reads_16bit_from<specs, I + 1>()>;
        using context = layer_context<static_cast<int>(I), spec_at<I - 1>, next_of<I>, DecodeLength, specs, false,
                                      precision, Gpu>;
        using layer = typename spec::template bind<typename previous::output_shape, context>;
        return boost::hana::append(so_far, boost::hana::type_c<layer>);
      });

  using tuple = typename decltype(boost::hana::unpack(bound, [](auto... layers) {
    return std::type_identity<std::tuple<typename decltype(layers)::type...>>{};
  }))::type;
};

}  // namespace detail

namespace detail {

// A network's bound layers and every per-layer fact the memory plan, the
// step program and the model read. sequential is the network over whole
// samples; sequential::decoder the same specs bound for one position at a
// time (same parameters, same layout), which model::generate runs. Gpu:
// bound for tf::cuda (contract/layer.hpp's layer_context says what changes).
template <int DecodeLength, class InputShape, class Policy, bool Gpu, class Input, class... Layers>
struct bound_network {
  // The specs as a Hana type list, for users' own compile-time algorithms.
  static constexpr auto specs = boost::hana::tuple_t<Input, Layers...>;
  using input_layer = Input;
  using input_shape_type = InputShape;
  using input_dtype = typename Input::dtype;
  using policy = Policy;
  static constexpr int decode_length = DecodeLength;
  static constexpr bool gpu = Gpu;

  // The bound layers, in order; layer 0 is the input.
  using layers = typename detail::bind_layers<DecodeLength, InputShape, Policy, Gpu, Input, Layers...>::tuple;
  static constexpr std::size_t layer_count = 1 + sizeof...(Layers);
  template <std::size_t I>
  using layer = std::tuple_element_t<I, layers>;
  template <std::size_t I>
  using spec = std::tuple_element_t<I, std::tuple<Input, Layers...>>;

  using output_shape_type = typename layer<layer_count - 1>::output_shape;
  static constexpr output_shape_type output_shape{};
  static constexpr input_shape_type input_shape{};

 private:
  template <class F>
  static constexpr auto per_layer(F f) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::array{f.template operator()<layer<I>>()...};
    }(std::make_index_sequence<layer_count>{});
  }

 public:
  // Per-layer facts as arrays, indexed by position. A layer's output as
  // stored: rows padded where the layer asks (contract/layer.hpp).
  static constexpr auto output_sizes = per_layer([]<class L>() { return stored_output_size<L>(); });
  // Whether the loss writes its gradient over the output (contract/layer.hpp).
  static constexpr bool loss_gradient_in_place = layer<layer_count - 1>::loss_gradient_over_output;
  // The network's output as stored: float, or bf16 for a GPU's tied_logits
  // under a bfloat16 compute dtype, whose loss gradient, written over it in
  // place, is bf16 too (layers/embedding.hpp).
  using output_value = typename layer<layer_count - 1>::output_dtype::value_type;
  static constexpr bool bf16_logits = loss_gradient_in_place && std::is_same_v<output_value, bf16>;
  // Values from one row of the network's output (and of its gradient) to
  // the next: the last axis, or a GPU's padded vocabulary (tied_logits).
  static constexpr int output_row_stride = [] {
    using last = layer<layer_count - 1>;
    if constexpr (last::stored_row_length > 0)
      return last::stored_row_length;
    else if constexpr (last::output_shape::rank >= 1)
      return last::output_shape::template dim<-1>;
    else
      return 1;
  }();
  // Bytes of one element of each layer's stored output: 2 where it is kept in 16 bits.
  static constexpr auto output_element_bytes =
      per_layer([]<class L>() { return sizeof(typename L::output_dtype::value_type); });
  // Floats of each layer's parameters: its trained group and its frozen
  // tensors (frozen_param: a LoRA layer's base kernel), which have neither
  // gradient nor optimizer slot.
  static constexpr auto param_floats =
      per_layer([]<class L>() { return L::params::floats + L::params::frozen_floats; });
  static constexpr auto frozen_param_floats = per_layer([]<class L>() { return L::params::frozen_floats; });
  static constexpr auto param_counts =
      per_layer([]<class L>() { return L::params::parameter_count; });
  static constexpr auto trainable_counts = per_layer([]<class L>() { return L::params::trainable_count; });
  static constexpr auto output_aliases_input =
      per_layer([]<class L>() { return L::output_aliases_input; });
  static constexpr auto gradient_in_place = per_layer([]<class L>() { return L::gradient_in_place; });
  static constexpr auto workspace_bytes_per_sample =
      per_layer([]<class L>() { return L::workspace_bytes_per_sample; });
  static constexpr auto workspace_bytes_per_step =
      per_layer([]<class L>() { return L::workspace_bytes_per_step; });
  static constexpr auto scratch_bytes_per_sample =
      per_layer([]<class L>() { return L::scratch_bytes_per_sample; });
  static constexpr auto scratch_bytes_per_step =
      per_layer([]<class L>() { return L::scratch_bytes_per_step; });
  static constexpr auto uses_tied_embedding = per_layer([]<class L>() { return L::uses_tied_embedding; });
  // Whether layer I's parameters are trained: all but those of frozen<...>.
  static constexpr auto trainable = per_layer([]<class L>() {
    if constexpr (requires { L::trainable; })
      return L::trainable;
    else
      return true;
  });
  static constexpr auto layer_flops = per_layer([]<class L>() { return L::flops_per_sample; });

  // Whether any parameter of the network carries a regularizer.
  static constexpr bool has_regularizers = [] {
    for (bool b : per_layer([]<class L>() {
           return []<std::size_t... P>(std::index_sequence<P...>) {
             return (std::tuple_element_t<P, typename L::params::tuple>::regularizer::active || ... || false);
           }(std::make_index_sequence<L::params::count>{});
         }))
      if (b) return true;
    return false;
  }();

  static constexpr std::size_t parameter_count = [] {
    std::size_t sum = 0;
    for (auto c : param_counts) sum += c;
    return sum;
  }();
  // Floats of the parameter region, with each tensor 64-byte aligned.
  static constexpr std::size_t parameter_floats = [] {
    std::size_t sum = 0;
    for (auto c : param_floats) sum += c;
    return sum;
  }();
  // Floats each layer trains: its parameters but its frozen tensors, and
  // none of a frozen<...> layer's.
  static constexpr auto trained_floats = [] {
    std::array<std::size_t, layer_count> floats{};
    for (std::size_t i = 0; i < layer_count; ++i) floats[i] = trainable[i] ? param_floats[i] - frozen_param_floats[i] : 0;
    return floats;
  }();
  // The gradient region's and each optimizer slot's size.
  static constexpr std::size_t trainable_floats = [] {
    std::size_t sum = 0;
    for (auto f : trained_floats) sum += f;
    return sum;
  }();
  static constexpr std::size_t trainable_count = [] {
    std::size_t sum = 0;
    for (std::size_t i = 0; i < layer_count; ++i)
      if (trainable[i]) sum += trainable_counts[i];
    return sum;
  }();

  // Forward FLOPs per sample (a multiply-add counts two).
  static constexpr std::size_t flops_per_sample = [] {
    std::size_t sum = 0;
    for (auto c : layer_flops) sum += c;
    return sum;
  }();

  // Whether layer I must produce the gradient of its input: only when some
  // layer before it has parameters that are trained (the data itself, and a
  // frozen stretch at the bottom, need no gradient: backward stops above it).
  static constexpr auto needs_input_gradient = [] {
    std::array<bool, layer_count> needs{};
    bool parameters_before = false;
    for (std::size_t i = 0; i < layer_count; ++i) {
      needs[i] = parameters_before;
      parameters_before = parameters_before || trained_floats[i] > 0;
    }
    return needs;
  }();

  // The layer's type as written, e.g. "dense<512>".
  template <std::size_t I>
  static std::string layer_type_name() {
    return spec<I>::type_name();
  }
};

// (T, ...) -> (1, ...): one position of a sequence.
template <class Shape>
struct one_position;
template <int First, int... Rest>
struct one_position<shape<First, Rest...>> {
  using type = shape<1, Rest...>;
};

}  // namespace detail

namespace detail {

// The network bound under a precision policy (for the CPU, or for tf::cuda
// when Gpu), with its decoder: the same specs for generation, one position
// per call, key/value caches sized for the input's first axis (the block size).
template <class Policy, bool Gpu, class Input, class... Layers>
struct network_under : bound_network<0, typename Input::shape_type, Policy, Gpu, Input, Layers...> {
  using decoder = bound_network<Input::shape_type::template dim<0>,
                                typename one_position<typename Input::shape_type>::type, Policy, Gpu, Input, Layers...>;
};

// sequential<input, Layers...> is the network bound in float32 for the CPU;
// under<P, Gpu> binds it under policy P, for tf::cuda when Gpu (model<Net,
// P, S, Device> does this).
template <class Input, class... Layers>
struct network_sequential : network_under<float32_policy, false, Input, Layers...> {
  template <class Policy, bool Gpu = false>
  using under = network_under<Policy, Gpu, Input, Layers...>;
};

// sequential<Layers...> without an input: a block, usable as one layer
// (inside repeat<>, recompute<>, residual<> or a network).
template <class... Layers>
struct nested_sequential {
  static std::string type_name() { return "sequential<" + detail::type_names<Layers...>() + ">"; }
  template <class In, class Context>
  struct bind : chain_binding_after<Context, In, false, input_before_block<Context>, Layers...> {};
};

template <class First, class... Rest>
using sequential_base =
    std::conditional_t<is_input_v<First>, network_sequential<First, Rest...>, nested_sequential<First, Rest...>>;

}  // namespace detail

// sequential<input<...>, Layers...>: a network. sequential<Layers...> whose
// first element is not an input: a block of layers used as one layer.
template <class First, class... Rest>
struct sequential<First, Rest...> : detail::sequential_base<First, Rest...> {};

template <class T>
inline constexpr bool is_sequential_v = false;
template <class First, class... L>
inline constexpr bool is_sequential_v<sequential<First, L...>> = is_input_v<First>;

}  // namespace typeflow

// graph_executor<Layer, Batch, Device>: a graph's nodes run as one layer, on
// any device (model/graph.hpp has the rules and the layout).
//
//   workspace (kept)  each node's own output buffer, then each node's workspace
//   scratch           the gradient buffers (offsets planned at compile time:
//                     graph_binding::gradient_offset, times the batch), the
//                     spare gradient buffer, the spare parameter gradient of
//                     shared<> uses, then the nodes' own scratch
//
// Forward runs the nodes in order. Backward runs them in reverse: a node
// reads its output's gradient buffer and writes its inputs' (or the spare
// buffer, added in after, where another reader wrote first). What the graph
// does to memory itself goes through the device's copy_bytes and
// add_in_place, so it is written once.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "typeflow/contract/executor.hpp"
#include "typeflow/model/graph.hpp"
#include "typeflow/contract/layer.hpp"
#include "typeflow/model/merge_executor.hpp"

namespace typeflow {

template <class Layer, int Batch, class Device>
class graph_executor {
  static constexpr std::size_t count = Layer::count;
  static constexpr std::size_t batch = static_cast<std::size_t>(Batch);
  static constexpr auto sources = Layer::sources;

  static constexpr auto output_offset = [] {
    std::array<std::size_t, count + 1> at{};
    std::size_t end = 0;
    for (std::size_t k = 1; k <= count; ++k) {
      at[k] = end;
      if (Layer::output_home[k] == k) end += batch * align_up(Layer::out_bytes[k]);
    }
    return at;
  }();
  // The last node writes the graph's output (or is a view): nothing after it.
  static constexpr std::size_t outputs_end = output_offset[count];
  static constexpr auto workspace_offset = [] {
    std::array<std::size_t, count + 1> at{};
    std::size_t end = outputs_end;
    for (std::size_t k = 1; k <= count; ++k) {
      at[k] = end;
      end += align_up(batch * Layer::ws_per_sample[k] + Layer::ws_per_step[k]);
    }
    return at;
  }();
  static constexpr std::size_t spare_offset = batch * Layer::gradient_area_per_sample;
  static constexpr std::size_t spare_gradient_offset = spare_offset + batch * Layer::spare_per_sample;
  static constexpr std::size_t child_scratch_offset =
      spare_gradient_offset + align_up(Layer::spare_gradient_floats * sizeof(float));
  static_assert(child_scratch_offset + batch * Layer::largest_child_scratch_per_sample +
                        Layer::largest_child_scratch_per_step <=
                    batch * Layer::scratch_bytes_per_sample + Layer::scratch_bytes_per_step,
                "graph_executor: the scratch layout outgrew what the graph declared");

  // The node that holds node k's parameters (itself, or its shared<> target).
  static constexpr std::size_t owner(std::size_t k) {
    return Layer::shared_with[k] == detail::no_node ? k : Layer::shared_with[k];
  }
  static constexpr std::size_t param_offset(std::size_t k) {
    std::size_t sum = 0;
    for (std::size_t i = 1; i < owner(k); ++i) sum += Layer::own_param_floats[i];
    return sum;
  }
  static constexpr std::size_t frozen_offset(std::size_t k) {
    std::size_t sum = 0;
    for (std::size_t i = 1; i < owner(k); ++i) sum += Layer::own_frozen_floats[i];
    return sum;
  }

  template <std::size_t K>
  static auto executor_type_of() {
    using bound = typename Layer::template node_at<K>;
    if constexpr (Layer::is_input_node[K])
      return std::type_identity<input_slice_executor<bound, Batch, Device>>{};
    else if constexpr (Layer::is_merge[K])
      return std::type_identity<merge_executor<bound, Batch, Device>>{};
    else
      return std::type_identity<executor<typename Layer::template spec_at<K>, bound, Batch, Device>>{};
  }
  template <std::size_t K>
  using node_executor = typename decltype(executor_type_of<K>())::type;
  template <class Sequence>
  struct executors_of;
  template <std::size_t... I>
  struct executors_of<std::index_sequence<I...>> {
    using type = std::tuple<node_executor<I + 1>...>;
  };
  using nodes_type = typename executors_of<std::make_index_sequence<count>>::type;

 public:
  explicit graph_executor(const layer_io<Device>& io)
      : io_(io), kept_(io.workspace), transient_(io.scratch), nodes_(make_nodes(std::make_index_sequence<count>{})) {}

  std::size_t scratchpad_bytes() const {
    std::size_t bytes = 0;
    std::apply([&](const auto&... e) { ((bytes = std::max(bytes, e.scratchpad_bytes())), ...); }, nodes_);
    return bytes;
  }
  void bind(std::byte* scratchpad) {
    std::apply([&](auto&... e) { (e.bind(scratchpad), ...); }, nodes_);
  }

  void forward() {
    std::apply([](auto&... e) { (e.forward(), ...); }, nodes_);
    if constexpr (Layer::output_is_view)
      copy_bytes(*io_.context, io_.out, output(count), batch * Layer::out_sizes[count] * sizeof(float));
  }

  void backward() {
    if constexpr (Layer::gradient_buffer[count] != Layer::external_gradient)
      copy_bytes(*io_.context, gradient(count), io_.d_out, batch * Layer::out_sizes[count] * sizeof(float));
    [this]<std::size_t... I>(std::index_sequence<I...>) {
      (backward_node<count - I>(), ...);
    }(std::make_index_sequence<count>{});
  }

 private:
  float* output(std::size_t k) const {
    const std::size_t home = Layer::output_home[k];
    if (home == Layer::from_input) return const_cast<float*>(io_.in);
    if (home == Layer::to_output) return io_.out;
    return reinterpret_cast<float*>(kept_ + output_offset[home]);
  }
  float* gradient(std::size_t k) const {
    const std::size_t b = Layer::gradient_buffer[k];
    if (b == Layer::external_gradient) return const_cast<float*>(io_.d_out);
    return reinterpret_cast<float*>(transient_ + batch * Layer::gradient_offset[b]);
  }
  // Where the gradient of node p's output goes: its buffer, or the graph's
  // d_in for the input (null when nothing wants it, as for named inputs).
  float* destination(std::size_t p) const {
    if (Layer::is_input_node[p]) return nullptr;
    return p == 0 ? io_.d_in : gradient(p);
  }
  float* spare() const { return reinterpret_cast<float*>(transient_ + spare_offset); }
  float* spare_gradient() const { return reinterpret_cast<float*>(transient_ + spare_gradient_offset); }

  template <std::size_t K>
  node_executor<K> make_node() const {
    if constexpr (Layer::is_input_node[K]) {
      return node_executor<K>(output(0), output(K), io_.context);
    } else if constexpr (Layer::is_merge[K]) {
      std::array<const float*, Layer::input_counts[K]> in{};
      for (std::size_t j = 0; j < in.size(); ++j) in[j] = output(sources[K][j]);
      return node_executor<K>(in, output(K), kept_ + workspace_offset[K], io_.context);
    } else {
      layer_io<Device> io = io_;
      const std::size_t p = sources[K][0];
      io.in = output(p);
      io.out = output(K);
      io.d_out = gradient(K);
      io.salt = child_salt(io_.salt, K - 1);
      if constexpr (Layer::in_place[K])
        io.d_in = gradient(K);
      else
        io.d_in = !destination(p) ? nullptr : Layer::edge_writes[K][0] ? destination(p) : spare();
      io.params = io_.params + param_offset(K);
      io.grads = Layer::shared_writes[K] ? io_.grads + param_offset(K) : spare_gradient();
      if (io_.frozen_params) io.frozen_params = io_.frozen_params + frozen_offset(K);
      io.workspace = kept_ + workspace_offset[K];
      io.scratch = transient_ + child_scratch_offset;
      return node_executor<K>(io);
    }
  }
  template <std::size_t... I>
  nodes_type make_nodes(std::index_sequence<I...>) const {
    return nodes_type{make_node<I + 1>()...};
  }

  template <std::size_t K>
  void backward_node() {
    auto& node = std::get<K - 1>(nodes_);
    auto& c = *io_.context;
    if constexpr (Layer::is_input_node[K]) {
      (void)node;  // the data takes no gradient
    } else if constexpr (Layer::is_merge[K]) {
      for (std::size_t j = 0; j < Layer::input_counts[K]; ++j) {
        const std::size_t p = sources[K][j];
        float* to = destination(p);
        if (!to) continue;
        if (Layer::edge_writes[K][j]) {
          node.backward_input(j, gradient(K), to);
        } else {
          node.backward_input(j, gradient(K), spare());
          add_in_place(c, to, spare(), batch * Layer::out_sizes[p]);
        }
      }
    } else {
      node.backward();
      constexpr std::size_t p = sources[K][0];
      const std::size_t n = batch * Layer::out_sizes[p];
      if (float* to = destination(p)) {
        if constexpr (Layer::in_place[K] && !Layer::shares_source_buffer[K]) {
          if (Layer::edge_writes[K][0])
            copy_bytes(c, to, gradient(K), n * sizeof(float));
          else
            add_in_place(c, to, gradient(K), n);
        } else if constexpr (!Layer::in_place[K] && !Layer::edge_writes[K][0]) {
          add_in_place(c, to, spare(), n);
        }
      }
      if constexpr (!Layer::shared_writes[K])
        add_in_place(c, io_.grads + param_offset(K), spare_gradient(),
                     Layer::template node_at<K>::params::floats);
    }
  }

  layer_io<Device> io_;
  std::byte* kept_;
  std::byte* transient_;
  nodes_type nodes_;
};

// A graph-bound layer (graph<...>, functional<...>'s body) runs as its graph.
template <class Spec, class Layer, int Batch, class Device>
  requires Layer::is_graph
class executor<Spec, Layer, Batch, Device> : public graph_executor<Layer, Batch, Device> {
 public:
  using graph_executor<Layer, Batch, Device>::graph_executor;
};

}  // namespace typeflow

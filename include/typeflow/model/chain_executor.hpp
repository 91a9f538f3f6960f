// chain_executor<Layer, Batch, Device>: a combinator's children run as one
// layer (residual, recompute, repeat, a nested sequential), on any device.
//
// The layout is chain_binding's (model/chain.hpp): each child's kept output
// and workspace in the kept region (the layer's workspace, or its scratch
// under recompute), then three gradient buffers the children's backward
// passes alternate between, then the children's own scratch. The children
// are found through executor<Spec, Layer, Batch, Device>; what the chain
// itself does to memory (one copy of d_out; residual's sums) goes through
// the device's copy_bytes and add_in_place, so it is written once.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <tuple>
#include <utility>

#include "typeflow/model/chain.hpp"
#include "typeflow/contract/executor.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {

template <class Layer, int Batch, class Device>
class chain_executor {
  static constexpr std::size_t n = Layer::n;
  static constexpr bool Kept = Layer::Kept;
  static constexpr auto output_slot = Layer::output_slot;
  static constexpr auto gradient_slot = Layer::gradient_slot;
  static constexpr auto out_bytes = Layer::out_bytes;
  static constexpr auto out_sizes = Layer::out_sizes;
  static constexpr auto in_place = Layer::in_place;
  static constexpr auto child_ws_per_sample = Layer::child_ws_per_sample;
  static constexpr auto child_ws_per_step = Layer::child_ws_per_step;
  static constexpr auto child_param_floats = Layer::child_param_floats;
  static constexpr auto child_frozen_floats = Layer::child_frozen_floats;
  static constexpr int from_input = Layer::from_input, to_output = Layer::to_output;
  static constexpr int external_out = Layer::external_out, external_in = Layer::external_in;

  // Byte offsets of each child's kept output and workspace, then of the
  // gradient buffers and the children's scratch.
  static constexpr std::size_t region(std::size_t per_sample, std::size_t per_step) {
    return align_up(static_cast<std::size_t>(Batch) * per_sample + per_step);
  }
  static constexpr auto output_offset = [] {
    std::array<std::size_t, n> at{};
    std::size_t end = 0;
    for (std::size_t i = 0; i < n; ++i) {
      at[i] = end;
      if (output_slot[i] == static_cast<int>(i)) end += region(out_bytes[i], 0);
    }
    return at;
  }();
  static constexpr std::size_t outputs_end = [] {
    std::size_t end = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (output_slot[i] == static_cast<int>(i)) end += region(out_bytes[i], 0);
    return end;
  }();
  static constexpr auto workspace_offset = [] {
    std::array<std::size_t, n> at{};
    std::size_t end = outputs_end;
    for (std::size_t i = 0; i < n; ++i) {
      at[i] = end;
      end += region(child_ws_per_sample[i], child_ws_per_step[i]);
    }
    return at;
  }();
  static constexpr std::size_t kept_end = [] {
    std::size_t end = outputs_end;
    for (std::size_t i = 0; i < n; ++i) end += region(child_ws_per_sample[i], child_ws_per_step[i]);
    return end;
  }();
  static_assert(kept_end <= static_cast<std::size_t>(Batch) * Layer::kept_per_sample + Layer::kept_per_step);
  static constexpr std::size_t gradient_bytes = region(Layer::largest_output * sizeof(float), 0);

 public:
  explicit chain_executor(const layer_io<Device>& io)
      : io_(io),
        kept_(Kept ? io.workspace : io.scratch),
        transient_(Kept ? io.scratch : io.scratch + kept_end),
        children_(make_children(std::make_index_sequence<n>{})) {}

  std::size_t scratchpad_bytes() const {
    std::size_t bytes = 0;
    std::apply([&](const auto&... c) { ((bytes = std::max(bytes, c.scratchpad_bytes())), ...); }, children_);
    return bytes;
  }
  void bind(std::byte* scratchpad) {
    std::apply([&](auto&... c) { (c.bind(scratchpad), ...); }, children_);
  }

  void forward() {
    if (io_.hooks) {  // zero<3>: each child's weights gathered for it
      [this]<std::size_t... I>(std::index_sequence<I...>) { (hooked<I, false>(), ...); }(std::make_index_sequence<n>{});
      return;
    }
    std::apply([](auto&... c) { (c.forward(), ...); }, children_);
  }

  void backward() {
    if constexpr (!Kept) forward();  // recompute: the activations were not kept
    if constexpr (in_place[n - 1])
      copy_bytes(*io_.context, gradient(gradient_slot[n - 1]), io_.d_out,
                 static_cast<std::size_t>(Batch) * out_sizes[n - 1] * sizeof(float));
    if (io_.hooks) {
      [this]<std::size_t... I>(std::index_sequence<I...>) {
        (hooked<n - 1 - I, true>(), ...);
      }(std::make_index_sequence<n>{});
      return;
    }
    [this]<std::size_t... I>(std::index_sequence<I...>) {
      (std::get<n - 1 - I>(children_).backward(), ...);
    }(std::make_index_sequence<n>{});
  }

 protected:
  const layer_io<Device>& io() const { return io_; }  // for residual's skip connection

 private:
  // Child I's trained parameters, for the hooks.
  template <std::size_t I>
  static constexpr std::size_t param_offset_of = [] {
    std::size_t offset = 0;
    for (std::size_t i = 0; i < I; ++i) offset += child_param_floats[i];
    return offset;
  }();
  // Child I's forward or backward between the hooks (when it has trained parameters).
  template <std::size_t I, bool Backward>
  void hooked() {
    const parameter_hooks& h = *io_.hooks;
    const float* params = io_.params + param_offset_of<I>;
    constexpr std::size_t floats = child_param_floats[I];
    if constexpr (floats > 0) h.before(h.owner, params, floats);
    if constexpr (Backward)
      std::get<I>(children_).backward();
    else
      std::get<I>(children_).forward();
    if constexpr (floats > 0) (Backward ? h.after_backward : h.after_forward)(h.owner, params, floats);
  }

  float* output(int slot) const {
    if (slot == from_input) return const_cast<float*>(io_.in);
    if (slot == to_output) return io_.out;
    return reinterpret_cast<float*>(kept_ + output_offset[static_cast<std::size_t>(slot)]);
  }
  float* gradient(int slot) const {
    if (slot == external_out) return const_cast<float*>(io_.d_out);
    if (slot == external_in) {
      if (io_.d_in) return io_.d_in;
      slot = 2;  // no gradient wanted outside: a leading in-place run works in buffer 2
    }
    return reinterpret_cast<float*>(transient_ + static_cast<std::size_t>(slot) * gradient_bytes);
  }

  template <std::size_t I>
  layer_io<Device> child_io() const {
    layer_io<Device> io = io_;
    io.in = I == 0 ? io_.in : output(output_slot[I - 1]);
    io.out = output(output_slot[I]);
    io.d_out = gradient(gradient_slot[I]);
    io.salt = child_salt(io_.salt, I);
    if constexpr (I == 0)
      io.d_in = in_place[0] ? gradient(gradient_slot[0]) : io_.d_in;
    else
      io.d_in = gradient(gradient_slot[I - 1]);
    io.hooks = nullptr;  // the hooks are this chain's alone
    std::size_t frozen_offset = 0;
    for (std::size_t i = 0; i < I; ++i) frozen_offset += child_frozen_floats[i];
    io.params = io_.params + param_offset_of<I>;
    io.grads = io_.grads + param_offset_of<I>;
    if (io_.frozen_params) io.frozen_params = io_.frozen_params + frozen_offset;
    io.workspace = kept_ + workspace_offset[I];
    io.workspace_persists = Kept && io_.workspace_persists;  // recompute: the children's live in scratch
    io.scratch = transient_ + 3 * gradient_bytes;
    return io;
  }

  template <std::size_t I>
  using child_executor = executor<typename Layer::template child_spec<I>, typename Layer::template child<I>, Batch, Device>;
  template <class Sequence>
  struct executors_of;
  template <std::size_t... I>
  struct executors_of<std::index_sequence<I...>> {
    using type = std::tuple<child_executor<I>...>;
  };
  using children_type = typename executors_of<std::make_index_sequence<n>>::type;

  template <std::size_t... I>
  children_type make_children(std::index_sequence<I...>) {
    return children_type{child_executor<I>(child_io<I>())...};
  }

  layer_io<Device> io_;
  std::byte* kept_;
  std::byte* transient_;
  children_type children_;
};

// Every chain-bound combinator (recompute, repeat, a nested sequential) runs
// as its chain; residual adds its skip connection (model/residual.hpp).
template <class Spec, class Layer, int Batch, class Device>
  requires Layer::is_chain
class executor<Spec, Layer, Batch, Device> : public chain_executor<Layer, Batch, Device> {
 public:
  using chain_executor<Layer, Batch, Device>::chain_executor;
};

}  // namespace typeflow

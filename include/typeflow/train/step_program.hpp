// step_program<Net, Batch, Device>: a network's forward and backward for one
// batch size on one device, generated from the types and bound to fixed
// arena addresses.
//
// Set-up creates every layer's executor (oneDNN primitives or cuBLASLt
// plans included), found through executor<Spec, Layer, Batch, Device>, and
// binds it once; forward() and backward() are then folds over a std::tuple
// of executors, inlined, with nothing created or allocated. The arena is
// host memory on the CPU and one GPU's memory on CUDA, laid out by the same
// memory plan.
#pragma once

#include <algorithm>
#include <cstddef>
#include <tuple>
#include <utility>

#include "typeflow/backend/device.hpp"
#include "typeflow/contract/executor.hpp"
#include "typeflow/contract/layer.hpp"
#include "typeflow/model/memory_plan.hpp"

namespace typeflow {

template <class Net, int Batch, class Device>
class step_program {
 public:
  using plan = memory_plan<Net, Batch, 0>;  // step-region offsets; shifted by the slots at run time
  using device = Device;
  static constexpr int batch_size = Batch;
  static constexpr std::size_t layer_count = Net::layer_count;
  static constexpr std::size_t last = layer_count - 1;
  using output_shape = typename Net::output_shape_type;

  // `arena` is the start of the model's arena on the device, and
  // `step_base` where its step region starts: after the parameters,
  // gradients and the optimizer's slots.
  step_program(std::byte* arena, std::size_t step_base, typename Device::context& context, const run_state& run)
      : base_(arena + step_base - plan::activations_offset),
        params_(reinterpret_cast<float*>(arena + plan::parameters_offset)),
        grads_(reinterpret_cast<float*>(arena + plan::gradients_offset)),
        executors_(make_executors(context, run, std::make_index_sequence<layer_count>{})),
        scratchpad_(scratchpad_bytes()) {
    std::apply([&](auto&... e) { (e.bind(scratchpad_.data()), ...); }, executors_);
  }

  float* input() const { return activation(0); }
  float* output() const { return activation(last); }
  // d(loss)/d(output), where the loss writes: over output() itself where
  // the plan says so (Net::loss_gradient_in_place, a GPU's tied_logits).
  float* output_gradient() const { return gradient_of_output(last); }
  float* row_losses() const { return reinterpret_cast<float*>(base_ + plan::loss_rows_offset); }

  void forward() {
    std::apply([](auto&... e) { (e.forward(), ...); }, executors_);
  }
  void backward() {
    [this]<std::size_t... I>(std::index_sequence<I...>) {
      (std::get<last - I>(executors_).backward(), ...);
    }(std::make_index_sequence<layer_count>{});
  }
  // Layer i's forward alone (zero<3> gathers each layer's weights just before).
  void forward_layer(std::size_t i) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((I == i ? std::get<I>(executors_).forward() : void()), ...);
    }(std::make_index_sequence<layer_count>{});
  }
  // Layer i's backward alone (mirrored<N> on GPUs interleaves the replicas
  // layer by layer, so that each gradient bucket's all-reduce starts early;
  // zero<3> gathers each layer's weights before it and reduces its gradients after).
  void backward_layer(std::size_t i) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((I == i ? std::get<I>(executors_).backward() : void()), ...);
    }(std::make_index_sequence<layer_count>{});
  }

 private:
  float* activation(std::size_t i) const {
    return reinterpret_cast<float*>(base_ + plan::activation_offset[i]);
  }
  float* gradient_of_output(std::size_t i) const {
    return reinterpret_cast<float*>(base_ + plan::output_gradient_offset(i));
  }

  template <std::size_t I>
  using executor_at = executor<typename Net::template spec<I>, typename Net::template layer<I>, Batch, Device>;

  template <std::size_t I>
  executor_at<I> make_executor(typename Device::context& context, const run_state& run) {
    using layer = typename Net::template layer<I>;
    layer_io<Device> io;
    io.in = I > 0 ? activation(I - 1) : nullptr;
    io.out = activation(I);
    io.d_in = (I > 0 && Net::needs_input_gradient[I]) ? gradient_of_output(I - 1) : nullptr;
    io.d_out = gradient_of_output(I);
    io.params = params_ + plan::layer_parameter_offset[I] / sizeof(float);
    io.grads = grads_ + plan::layer_parameter_offset[I] / sizeof(float);
    if constexpr (layer::params::frozen_floats > 0) io.frozen_params = params_ + plan::layer_frozen_offset[I] / sizeof(float);
    io.workspace = base_ + plan::workspace_offset[I];
    io.workspace_persists = true;
    io.scratch = base_ + plan::scratch_offset;
    if constexpr (layer::uses_tied_embedding) {
      constexpr std::size_t source = tied_embedding_layer();
      io.tied_params = params_ + plan::layer_parameter_offset[source] / sizeof(float);
      io.tied_grads = grads_ + plan::layer_parameter_offset[source] / sizeof(float);
    }
    if constexpr (I == tied_embedding_layer() && any_tied()) io.tied_gradient_written = true;
    io.context = &context;
    io.run = &run;
    if constexpr (requires { layer::is_chain; })
      if (layer::is_chain && Net::trained_floats[I] > 0) io.hooks = run.hooks;
    io.salt = I;
    return executor_at<I>(io);
  }
  // The layer whose matrix tied_logits reuses: the first with an
  // `embedding_matrix` fact (embedding<V, D>); layer_count when none.
  static constexpr std::size_t tied_embedding_layer() {
    return []<std::size_t... I>(std::index_sequence<I...>) {
      std::size_t found = layer_count;
      ((found = (found == layer_count && requires { Net::template layer<I>::embedding_matrix; }) ? I : found), ...);
      return found;
    }(std::make_index_sequence<layer_count>{});
  }
  static constexpr bool any_tied() {
    for (bool b : Net::uses_tied_embedding)
      if (b) return true;
    return false;
  }

  template <class Sequence>
  struct executors_of;
  template <std::size_t... I>
  struct executors_of<std::index_sequence<I...>> {
    using type = std::tuple<executor_at<I>...>;
  };
  using executors_type = typename executors_of<std::make_index_sequence<layer_count>>::type;

  template <std::size_t... I>
  executors_type make_executors(typename Device::context& context, const run_state& run, std::index_sequence<I...>) {
    return executors_type{make_executor<I>(context, run)...};
  }
  std::size_t scratchpad_bytes() const {
    std::size_t bytes = 0;
    std::apply([&](const auto&... e) { ((bytes = std::max(bytes, e.scratchpad_bytes())), ...); }, executors_);
    return bytes;
  }

  std::byte* base_;
  float* params_;
  float* grads_;
  executors_type executors_;
  typename Device::scratchpad scratchpad_;
};

}  // namespace typeflow

// step_program<Net, Batch>: a network's forward and backward for one batch
// size, generated from the types and bound to fixed arena addresses.
//
// Set-up creates every layer's executor (oneDNN primitives included) and
// binds it once; forward() and backward() are then folds over a std::tuple of
// executors, inlined, with nothing created or allocated.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstddef>
#include <memory>
#include <tuple>
#include <utility>

#include "typeflow/backend/cpu/context.hpp"
#include "typeflow/model/layer.hpp"
#include "typeflow/model/memory_plan.hpp"
#include "typeflow/train/arena.hpp"

namespace typeflow {

template <class Net, int Batch>
class step_program {
 public:
  using plan = memory_plan<Net, Batch, 0>;  // step-region offsets; shifted by the slots at run time
  static constexpr int batch_size = Batch;
  static constexpr std::size_t layer_count = Net::layer_count;
  static constexpr std::size_t last = layer_count - 1;
  using output_shape = typename Net::output_shape_type;

  // `step_base` is where the step region starts: after the parameters,
  // gradients and the optimizer's slots.
  step_program(arena& memory, std::size_t step_base, backend::cpu::context& context, const run_state& run)
      : base_(memory.data() + step_base - plan::activations_offset),
        params_(memory.template at<float>(plan::parameters_offset)),
        grads_(memory.template at<float>(plan::gradients_offset)),
        executors_(make_executors(context, run, std::make_index_sequence<layer_count>{})) {
    std::size_t scratch = 0;
    std::apply([&](auto&... e) { ((scratch = std::max(scratch, e.scratchpad_bytes())), ...); }, executors_);
    scratchpad_.reset(scratch ? static_cast<std::byte*>(std::aligned_alloc(arena_alignment, align_up(scratch)))
                              : nullptr);
    std::apply([&](auto&... e) { (e.bind(scratchpad_.get()), ...); }, executors_);
  }

  float* input() const { return activation(0); }
  float* output() const { return activation(last); }
  // d(loss)/d(output), where the loss writes.
  float* output_gradient() const {
    return reinterpret_cast<float*>(base_ + plan::gradient_buffer_offset[plan::output_gradient_buffer[last]]);
  }
  float* row_losses() const { return reinterpret_cast<float*>(base_ + plan::loss_rows_offset); }

  void forward() {
    std::apply([](auto&... e) { (e.forward(), ...); }, executors_);
  }
  void backward() {
    [this]<std::size_t... I>(std::index_sequence<I...>) {
      (std::get<last - I>(executors_).backward(), ...);
    }(std::make_index_sequence<layer_count>{});
  }

 private:
  float* activation(std::size_t i) const {
    return reinterpret_cast<float*>(base_ + plan::activation_offset[i]);
  }
  float* gradient_of_output(std::size_t i) const {
    return reinterpret_cast<float*>(base_ + plan::gradient_buffer_offset[plan::output_gradient_buffer[i]]);
  }

  template <std::size_t I>
  auto make_executor(backend::cpu::context& context, const run_state& run) {
    using layer = typename Net::template layer<I>;
    layer_io io;
    io.in = I > 0 ? activation(I - 1) : nullptr;
    io.out = activation(I);
    io.d_in = (I > 0 && Net::needs_input_gradient[I]) ? gradient_of_output(I - 1) : nullptr;
    io.d_out = gradient_of_output(I);
    io.params = params_ + plan::layer_parameter_offset[I] / sizeof(float);
    io.grads = grads_ + plan::layer_parameter_offset[I] / sizeof(float);
    io.workspace = base_ + plan::workspace_offset[I];
    io.scratch = base_ + plan::scratch_offset;
    if constexpr (layer::uses_tied_embedding) {
      constexpr std::size_t source = tied_embedding_layer();
      io.tied_params = params_ + plan::layer_parameter_offset[source] / sizeof(float);
      io.tied_grads = grads_ + plan::layer_parameter_offset[source] / sizeof(float);
    }
    if constexpr (I == tied_embedding_layer() && any_tied()) io.tied_gradient_written = true;
    io.context = &context;
    io.run = &run;
    return typename layer::template executor<Batch>(io);
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
    using type = std::tuple<typename Net::template layer<I>::template executor<Batch>...>;
  };
  using executors_type = typename executors_of<std::make_index_sequence<layer_count>>::type;

  template <std::size_t... I>
  executors_type make_executors(backend::cpu::context& context, const run_state& run,
                                std::index_sequence<I...>) {
    return executors_type{make_executor<I>(context, run)...};
  }

  struct free_deleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };

  std::byte* base_;
  float* params_;
  float* grads_;
  executors_type executors_;
  std::unique_ptr<std::byte, free_deleter> scratchpad_;
};

}  // namespace typeflow

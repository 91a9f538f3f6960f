// frozen<Layers...>: layers whose parameters are not trained, Keras's
// `layer.trainable = False`, as a type.
//
//   using gpt = tf::sequential<tf::typed_input<tf::int32, 64>,
//       tf::frozen<tf::embedding<96, 128>, tf::positional_embedding<64>, tf::repeat<2, block>>,  // pretrained
//       tf::repeat<2, block>, tf::layer_norm, tf::dense<96>>;                                     // trained
//
// Since the compiler knows what is frozen, the memory plan gives the frozen
// parameters no gradient and no optimizer slot (they are laid out after the
// trainable ones, memory_plan.hpp), the optimizer never sees them, and
// backward computes no parameter gradient that anything keeps. Backward stops
// below the lowest layer with trainable parameters: a frozen block at the
// bottom of a network runs no backward at all. A frozen block between
// trainable layers still passes the gradient of its output to its input (its
// children's parameter gradients go to a scratch buffer that nothing reads).
//
// Inside frozen, every layer runs in inference mode, as Keras runs a frozen
// BatchNormalization: batch_norm normalises with its moving statistics and
// does not update them; dropout, too, passes everything through (Keras would
// still drop; a frozen pretrained body is usually run as in inference).
//
// Its parameters are frozen tensors (frozen_param, contract/layer.hpp), named
// like a nested sequential's ("layers.1.embedding.embeddings" at the top
// level, "blocks.3.dense.kernel" inside repeat<>), so frozen<...> goes
// wherever a block does: at the top level, or inside repeat, residual,
// recompute or a nested sequential (repeat<4, sequential<frozen<attention
// half>, trained MLP half>>). A layer with lora<> inside it is a compile
// error: freeze a layer or adapt it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>

#include "typeflow/model/chain.hpp"
#include "typeflow/model/chain_executor.hpp"
#include "typeflow/contract/executor.hpp"
#include "typeflow/layers/input.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {

template <class... Layers>
struct frozen {
  static std::string type_name() { return "frozen<" + detail::type_names<Layers...>() + ">"; }

  // The first child sees the network's input before it when frozen<...>
  // comes first (an embedding checks that it reads token ids).
  template <class Context>
  using first_previous = input_before_block<Context>;

  template <class In, class Context>
  struct bind : chain_binding_after<Context, In, false, first_previous<Context>, Layers...> {
    using chain = chain_binding_after<Context, In, false, first_previous<Context>, Layers...>;
    static_assert(layer_check<layer_at<Context::position, frozen>, given<In>, chain::params::frozen_floats == 0>::passed,
                  "frozen<Layers...>: a layer inside it has lora<> adapters, which would stay trained; freeze the "
                  "layer or adapt it, not both");
    static_assert(layer_check<layer_at<Context::position, frozen>, given<In>, !chain::uses_tied_embedding>::passed,
                  "frozen<...>: tied_logits inside frozen reads the embedding's gradient; freeze the embedding "
                  "and keep the head outside, or freeze both");
    // Every parameter of its children, frozen: in the plan's frozen region,
    // in the order the chain lays them out (its children have no frozen
    // tensors of their own, above).
    using params = typename detail::freeze_all<typename chain::params>::type;
    static constexpr bool trainable = false;  // summary() shows it as a frozen layer
    // Run by frozen's own executor (below), not as a plain chain.
    static constexpr bool is_chain = false;
    static constexpr bool is_frozen = true;
    // After the chain's own scratch: a buffer for the children's parameter
    // gradients, which nothing reads.
    static constexpr std::size_t discard_bytes = align_up(chain::params::floats * sizeof(float));
    static constexpr std::size_t scratch_bytes_per_step =
        chain::scratch_bytes_per_step + discard_bytes + arena_alignment;
  };
};

// frozen's executor, on every device: its chain, in inference mode, with the
// parameter gradients sent to the discard buffer; no backward at all when
// nothing below needs the gradient of its input.
template <class... Layers, class Layer, int Batch, class Device>
class executor<frozen<Layers...>, Layer, Batch, Device> {
  using chain = typename Layer::chain;

 public:
  explicit executor(const layer_io<Device>& io)
      : outer_run_(io.run),
        run_(std::make_unique<run_state>()),
        wants_input_gradient_(io.d_in != nullptr),
        chain_(chain_io(io, run_.get())) {}

  std::size_t scratchpad_bytes() const { return chain_.scratchpad_bytes(); }
  void bind(std::byte* scratchpad) { chain_.bind(scratchpad); }

  void forward() {
    *run_ = *outer_run_;
    run_->training = false;
    chain_.forward();
  }
  void backward() {
    if (!wants_input_gradient_) return;  // nothing below is trained
    *run_ = *outer_run_;
    run_->training = false;
    chain_.backward();
  }

 private:
  static layer_io<Device> chain_io(layer_io<Device> io, const run_state* run) {
    // The children read their parameters where the plan put frozen<>'s,
    // and write their gradients into the discard buffer, after what the
    // chain's own scratch may take.
    const std::size_t chain_scratch =
        align_up(static_cast<std::size_t>(Batch) * chain::scratch_bytes_per_sample + chain::scratch_bytes_per_step);
    io.params = io.frozen_params;
    io.frozen_params = nullptr;
    io.grads = reinterpret_cast<float*>(io.scratch + chain_scratch);
    io.run = run;
    return io;
  }

  const run_state* outer_run_;
  std::unique_ptr<run_state> run_;  // on the heap: the children keep its address across moves
  bool wants_input_gradient_;  // io.d_in is null when nothing below is trained
  chain_executor<chain, Batch, Device> chain_;
};

}  // namespace typeflow

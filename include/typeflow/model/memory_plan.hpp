// memory_plan<Net, Batch, OptimizerSlots>: where everything lives.
//
// One arena holds, in this order, each 64-byte aligned:
//   parameters      (P floats)         the weights, every tensor aligned: the
//                                      trained ones first (T floats, layer by
//                                      layer), then the frozen ones (frozen<...>
//                                      layers, and frozen tensors such as a
//                                      LoRA layer's base kernel)
//   gradients       (T floats)         the layout of the parameters' first T
//   optimizer slots (Slots x T floats) e.g. adam's m and v
// Without anything frozen T = P and every layer's parameters are in layer order.
//   activations     one (Batch, shape) buffer per layer output, except where
//                   a layer's output is its input's buffer (flatten, fused relu),
//                   in the layer's output dtype (2 bytes an element where a
//                   16-bit policy stores it in 16 bits)
//   gradient buffers two float32 buffers the backward pass alternates between
//                   (in-place layers stay on one), each (Batch, the largest
//                   output whose gradient it holds); a layer that computes
//                   in 16 bits rounds the gradients it writes
//   workspaces      per-layer bytes kept from forward to backward (dropout masks,
//                   attention probabilities, a combinator's inner activations)
//   scratch         bytes a layer needs only during one forward or backward
//                   call: one region, as large as the largest need, shared
//                   (a recomputed block's activations live here)
//   loss rows       (Batch x rows per sample) floats: each output row's loss
// Every offset is a compile-time constant; the parameters' offsets do not
// depend on Batch or Slots, so weights stay put when a model is compiled or
// fitted with another batch size.
#pragma once

#include <array>
#include <cstddef>

#include "typeflow/contract/layer.hpp"

namespace typeflow {

template <class Net, int Batch, int OptimizerSlots = 0>
struct memory_plan {
  static_assert(Batch >= 0, "memory_plan: the batch size must not be negative");
  static_assert(OptimizerSlots >= 0, "memory_plan: optimizer slots must not be negative");

  static constexpr std::size_t layer_count = Net::layer_count;
  static constexpr std::size_t parameter_floats = Net::parameter_floats;
  static constexpr std::size_t parameter_bytes = parameter_floats * sizeof(float);
  // The trainable part, which has gradients and optimizer slots.
  static constexpr std::size_t trainable_floats = Net::trainable_floats;
  static constexpr std::size_t trainable_bytes = trainable_floats * sizeof(float);

  // Byte offsets of each region.
  static constexpr std::size_t parameters_offset = 0;
  static constexpr std::size_t gradients_offset = parameter_bytes;
  static constexpr std::size_t slots_offset = gradients_offset + trainable_bytes;
  static constexpr std::size_t slot_offset(int slot) {
    return slots_offset + static_cast<std::size_t>(slot) * trainable_bytes;
  }
  static constexpr std::size_t activations_offset =
      slots_offset + static_cast<std::size_t>(OptimizerSlots) * trainable_bytes;

  // Byte offsets within the parameter region of layer i's trained group
  // (layer_parameter_offset: in layer order from 0) and of its frozen tensors
  // (layer_frozen_offset: from T on). A trainable layer's gradients sit at
  // its trained group's offset in the gradient region. A frozen<...> layer
  // has both groups from T on, one after the other.
  struct parameter_offsets {
    std::array<std::size_t, layer_count> trained{}, frozen{};
  };
  static constexpr parameter_offsets offsets_of_layers = [] {
    parameter_offsets offsets;
    std::size_t trained_at = 0, frozen_at = trainable_bytes;
    for (std::size_t i = 0; i < layer_count; ++i) {
      const std::size_t group = (Net::param_floats[i] - Net::frozen_param_floats[i]) * sizeof(float);
      if (Net::trainable[i]) {
        offsets.trained[i] = trained_at;
        trained_at += group;
      } else {
        offsets.trained[i] = frozen_at;
        frozen_at += group;
      }
      offsets.frozen[i] = frozen_at;
      frozen_at += Net::frozen_param_floats[i] * sizeof(float);
    }
    return offsets;
  }();
  static constexpr auto layer_parameter_offset = offsets_of_layers.trained;
  static constexpr auto layer_frozen_offset = offsets_of_layers.frozen;
  // Byte offset of layer i's gradients within the gradient region: its
  // trained group's offset when it is trainable; a frozen layer has none (an
  // empty span where the next trainable layer's begin).
  static constexpr auto layer_gradient_offset = [] {
    std::array<std::size_t, layer_count> offsets{};
    std::size_t at = 0;
    for (std::size_t i = 0; i < layer_count; ++i) {
      offsets[i] = at;
      at += Net::trained_floats[i] * sizeof(float);
    }
    return offsets;
  }();
  // Byte offset of parameter P of layer I within the parameter region.
  template <std::size_t I, std::size_t P>
  static constexpr std::size_t tensor_offset = [] {
    using params = typename Net::template layer<I>::params;
    return (params::template is_frozen<P> ? layer_frozen_offset[I] : layer_parameter_offset[I]) +
           params::template offset<P> * sizeof(float);
  }();

  static constexpr std::size_t output_bytes(std::size_t i) {
    return align_up(Batch * Net::output_sizes[i] * Net::output_element_bytes[i]);
  }

  // Layer i's output buffer.
  static constexpr auto activation_offset = [] {
    std::array<std::size_t, layer_count> offsets{};
    std::size_t at = activations_offset;
    for (std::size_t i = 0; i < layer_count; ++i) {
      if (i > 0 && Net::output_aliases_input[i]) {
        offsets[i] = offsets[i - 1];
      } else {
        offsets[i] = at;
        at += output_bytes(i);
      }
    }
    return offsets;
  }();
  static constexpr std::size_t activations_end = [] {
    std::size_t end = activations_offset;
    for (std::size_t i = 0; i < layer_count; ++i)
      if (i == 0 || !Net::output_aliases_input[i])
        end = activation_offset[i] + output_bytes(i);
    return end;
  }();
  static constexpr std::size_t activation_bytes = activations_end - activations_offset;

  // Which gradient buffer holds d(loss)/d(output of layer i). The loss writes
  // into buffer 0; a layer that is not in place writes its input's gradient
  // into the other buffer.
  static constexpr auto output_gradient_buffer = [] {
    std::array<int, layer_count> which{};
    which[layer_count - 1] = 0;
    for (std::size_t i = layer_count - 1; i > 0; --i)
      which[i - 1] = Net::gradient_in_place[i] ? which[i] : 1 - which[i];
    return which;
  }();

  // The two gradient buffers, each as large as the largest output whose
  // gradient it holds: a language model's logits need only buffer 0 (the
  // loss's), its head's input gradient goes to buffer 1 (GPT-2 124M at 16 x
  // 1024 tokens: 3.3 GB less than two buffers of the logits' size). Where
  // the loss writes over the output (Net::loss_gradient_in_place: a GPU's
  // tied_logits) the output's gradient needs neither.
  static constexpr std::array<std::size_t, 2> gradient_buffer_sizes = [] {
    std::array<std::size_t, 2> largest{};
    for (std::size_t i = 0; i < layer_count; ++i) {
      if (i == layer_count - 1 && Net::loss_gradient_in_place) continue;
      const auto b = static_cast<std::size_t>(output_gradient_buffer[i]);
      largest[b] = Net::output_sizes[i] > largest[b] ? Net::output_sizes[i] : largest[b];
    }
    return std::array<std::size_t, 2>{align_up(Batch * largest[0] * sizeof(float)),
                                      align_up(Batch * largest[1] * sizeof(float))};
  }();
  static constexpr std::array<std::size_t, 2> gradient_buffer_offset{activations_end,
                                                                     activations_end + gradient_buffer_sizes[0]};
  static constexpr std::size_t gradient_buffers_end = gradient_buffer_offset[1] + gradient_buffer_sizes[1];
  // Where d(loss)/d(output of layer i) lies: its gradient buffer, or the
  // output itself for the last layer when the loss writes in place.
  static constexpr std::size_t output_gradient_offset(std::size_t i) {
    if (i == layer_count - 1 && Net::loss_gradient_in_place) return activation_offset[i];
    return gradient_buffer_offset[output_gradient_buffer[i]];
  }

  static constexpr std::size_t workspace_bytes(std::size_t layer) {
    return align_up(Batch * Net::workspace_bytes_per_sample[layer] + Net::workspace_bytes_per_step[layer]);
  }
  static constexpr auto workspace_offset = [] {
    std::array<std::size_t, layer_count> offsets{};
    std::size_t at = gradient_buffers_end;
    for (std::size_t i = 0; i < layer_count; ++i) {
      offsets[i] = at;
      at += workspace_bytes(i);
    }
    return offsets;
  }();
  static constexpr std::size_t workspaces_end = [] {
    std::size_t end = gradient_buffers_end;
    for (std::size_t i = 0; i < layer_count; ++i) end += workspace_bytes(i);
    return end;
  }();
  static constexpr std::size_t workspace_total_bytes = workspaces_end - gradient_buffers_end;

  static constexpr std::size_t scratch_offset = workspaces_end;
  static constexpr std::size_t scratch_bytes = [] {
    std::size_t largest = 0;
    for (std::size_t i = 0; i < layer_count; ++i) {
      const std::size_t need = align_up(Batch * Net::scratch_bytes_per_sample[i] + Net::scratch_bytes_per_step[i]);
      largest = need > largest ? need : largest;
    }
    return largest;
  }();

  // What a step keeps from its forward pass to its backward pass: every
  // layer's output and workspace. recompute<Block> moves a block's inner
  // activations from here to the shared scratch region.
  static constexpr std::size_t kept_activation_bytes = activation_bytes + workspace_total_bytes;

  static constexpr std::size_t loss_rows_offset = scratch_offset + scratch_bytes;

  // The loss writes one value per output row: a sample's output has
  // output_size / last-axis rows (one per position of a sequence, say).
  static constexpr std::size_t loss_rows_per_sample = [] {
    using output = typename Net::output_shape_type;
    if constexpr (output::rank == 0)
      return std::size_t{1};
    else
      return output::size / static_cast<std::size_t>(output::template dim<-1>);
  }();
  static constexpr std::size_t total_bytes = loss_rows_offset + align_up(Batch * loss_rows_per_sample * sizeof(float));
  // Everything that scales with the batch: activations, their gradients,
  // workspaces and loss rows.
  static constexpr std::size_t per_step_bytes = total_bytes - activations_offset;
};

}  // namespace typeflow

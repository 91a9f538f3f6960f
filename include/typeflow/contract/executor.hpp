// executor<Spec, Layer, Batch, Device>: what runs one bound layer on a device.
//
// A layer header (layers/) states a layer's facts only; its executors live
// under backend/cpu and backend/cuda as specialisations of this template, on
// the layer's spec (dense<Units, Options...>, ...) for a bound Layer
// (Spec::bind<In, Context>) and a compile-time batch size. Combinators'
// executors (model/chain_executor.hpp) are written once for every device.
//
// The contract, the same on every device:
//
//   explicit executor(const layer_io<Device>& io);  // addresses fixed for its life
//   std::size_t scratchpad_bytes() const;   // a library's own scratch (oneDNN's
//   void bind(std::byte* scratchpad);       //   scratchpad, a CUDA kernel's scratch)
//   void forward();                         // reads io.in, writes io.out
//   void backward();                        // reads io.d_out, writes io.d_in (when
//                                           //   not null) and every element of io.grads
//
// Nothing is created or allocated in forward() or backward(). On the GPU
// they enqueue on io.context's stream and wait for nothing, so that a step
// can be captured as one graph.
#pragma once

#include <cstddef>

#include "typeflow/backend/device.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {

// A check whose name carries the layer and the device: g++ prints
// "'executor_check<layer_spec<dense<10> >, on_device<cuda>, false>::passed'
// evaluates to false" under the sentence.
template <class Spec>
struct layer_spec {};
template <class Device>
struct on_device {};
template <class Layer, class Device, bool Ok>
struct executor_check {
  static constexpr bool passed = Ok;
};

// The primary template: no executor for this layer on this device.
template <class Spec, class Layer, int Batch, class Device>
class executor {
  static_assert(executor_check<layer_spec<Spec>, on_device<Device>, false>::passed,
                "model<Net, Policy, Strategy, Device>: this layer has no executor on this device (both are "
                "named in the note below); include/typeflow/layers/README.md lists the library's layers, each with an "
                "executor on both devices");
};

// Layers that compute nothing (Layer::computes_nothing: the input, views
// whose output and gradient share their input's buffers) run on every device.
template <class Spec, class Layer, int Batch, class Device>
  requires Layer::computes_nothing
class executor<Spec, Layer, Batch, Device> : public executor_defaults {
 public:
  explicit executor(const layer_io<Device>&) {}
  void forward() {}
  void backward() {}
};

}  // namespace typeflow

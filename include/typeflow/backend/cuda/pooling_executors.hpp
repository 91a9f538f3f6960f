// The poolings and zero_padding2d on tf::cuda: their executors (the
// kernels: backend/cuda/pooling.hpp). backend/cuda/layers.hpp includes this.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "typeflow/backend/cuda/context.hpp"
#include "typeflow/backend/cuda/elementwise.hpp"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/backend/cuda/pooling.hpp"
#include "typeflow/layers/pooling.hpp"
#include "typeflow/layers/zero_padding2d.hpp"
#include "typeflow/contract/executor.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {
namespace backend::cuda {

// max_pooling2d: the argmax kept in the layer's workspace in training (the
// CPU's layout and index type), none in inference; backward gathers.
template <class Layer, int Batch>
class max_pooling_executor : public executor_defaults {
  using G = typename Layer::geometry;
  static constexpr int index_bytes = static_cast<int>(sizeof(typename Layer::index_type));

 public:
  explicit max_pooling_executor(const layer_io<typeflow::cuda>& io) : io_(io) {}

  void forward() {
    const bool training = !io_.run || io_.run->training;
    max_pool_forward(io_.in, io_.out, training ? io_.workspace : nullptr, index_bytes, G::windows, Batch,
                     io_.context->stream);
  }
  void backward() {
    if (io_.d_in) max_pool_backward(io_.d_out, io_.workspace, index_bytes, io_.d_in, G::windows, Batch, io_.context->stream);
  }

 private:
  layer_io<typeflow::cuda> io_;
};

template <class Layer, int Batch>
class average_pooling_executor : public executor_defaults {
  using G = typename Layer::geometry;

 public:
  explicit average_pooling_executor(const layer_io<typeflow::cuda>& io) : io_(io) {}

  void forward() { average_pool_forward(io_.in, io_.out, G::windows, Batch, io_.context->stream); }
  void backward() {
    if (io_.d_in) average_pool_backward(io_.d_out, io_.d_in, G::windows, Batch, io_.context->stream);
  }

 private:
  layer_io<typeflow::cuda> io_;
};

template <class Layer, int Batch>
class global_average_pooling_executor : public executor_defaults {
  static constexpr int pixels = static_cast<int>(Layer::pixels);

 public:
  explicit global_average_pooling_executor(const layer_io<typeflow::cuda>& io) : io_(io) {}

  void forward() { global_average_pool_forward(io_.in, io_.out, Batch, pixels, Layer::channels, io_.context->stream); }
  void backward() {
    if (io_.d_in)
      global_average_pool_backward(io_.d_out, io_.d_in, Batch, pixels, Layer::channels, io_.context->stream);
  }

 private:
  layer_io<typeflow::cuda> io_;
};

// zero_padding2d: the input inside zeros; backward, the gradient's interior.
template <class Layer, int Batch>
class zero_padding_executor : public executor_defaults {
  static constexpr zero_padding sizes{Layer::in_h, Layer::in_w, Layer::channels, Layer::pad_h, Layer::pad_w};

 public:
  explicit zero_padding_executor(const layer_io<typeflow::cuda>& io) : io_(io) {}

  void forward() { zero_pad_forward(io_.in, io_.out, sizes, Batch, io_.context->stream); }
  void backward() {
    if (io_.d_in) zero_pad_backward(io_.d_out, io_.d_in, sizes, Batch, io_.context->stream);
  }

 private:
  layer_io<typeflow::cuda> io_;
};

}  // namespace backend::cuda

template <window Pool, window Strides, padding Padding, class Layer, int Batch>
class executor<max_pooling2d<Pool, Strides, Padding>, Layer, Batch, cuda>
    : public backend::cuda::max_pooling_executor<Layer, Batch> {
 public:
  using backend::cuda::max_pooling_executor<Layer, Batch>::max_pooling_executor;
};
template <window Pool, window Strides, padding Padding, class Layer, int Batch>
class executor<average_pooling2d<Pool, Strides, Padding>, Layer, Batch, cuda>
    : public backend::cuda::average_pooling_executor<Layer, Batch> {
 public:
  using backend::cuda::average_pooling_executor<Layer, Batch>::average_pooling_executor;
};
template <class Layer, int Batch>
class executor<global_average_pooling2d, Layer, Batch, cuda>
    : public backend::cuda::global_average_pooling_executor<Layer, Batch> {
 public:
  using backend::cuda::global_average_pooling_executor<Layer, Batch>::global_average_pooling_executor;
};

template <window Pad, class Layer, int Batch>
class executor<zero_padding2d<Pad>, Layer, Batch, cuda> : public backend::cuda::zero_padding_executor<Layer, Batch> {
 public:
  using backend::cuda::zero_padding_executor<Layer, Batch>::zero_padding_executor;
};

}  // namespace typeflow

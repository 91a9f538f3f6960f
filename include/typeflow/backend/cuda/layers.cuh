// The layers' CUDA executors: for each bound layer of a network, what its
// forward and backward enqueue on a stream. They work on the same memory
// plan as the CPU executors (the same offsets, in a device arena), so a
// weights region is the same bytes on both devices.
//
// An executor is chosen by the layer's spec; a spec without one is a compile
// error naming the layer (cuda_executor's primary template). Everything an
// executor does is enqueued on the stream it is given, so a whole step can be
// captured as one CUDA graph: nothing is allocated, nothing waits for the host.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "typeflow/backend/cuda/elementwise.cuh"
#include "typeflow/backend/cuda/layer_norm.cuh"
#include "typeflow/backend/cuda/matmul.hpp"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/layers/activations.hpp"
#include "typeflow/layers/dense.hpp"
#include "typeflow/layers/dropout.hpp"
#include "typeflow/layers/input.hpp"
#include "typeflow/layers/layer_norm.hpp"
#include "typeflow/layers/reshape.hpp"
#include "typeflow/model/layer.hpp"

namespace typeflow::backend::cuda {

// Values that change every step and that a captured graph reads from device
// memory (the host refreshes them before each launch).
struct step_values {
  std::uint64_t step = 0;  // the training step, as run_state::step on the CPU (dropout's counter)
};

// The fixed device addresses one layer works on (layer_io's CUDA twin).
struct device_layer_io {
  const float* in = nullptr;
  float* out = nullptr;
  float* d_in = nullptr;  // nullptr: no input gradient wanted
  const float* d_out = nullptr;
  float* params = nullptr;
  float* grads = nullptr;
  std::byte* workspace = nullptr;  // kept from forward to backward
  std::byte* scratch = nullptr;    // one call's scratch, shared by every layer
  cublasLtHandle_t lt = nullptr;
  std::byte* gemm_workspace = nullptr;
  std::size_t gemm_workspace_bytes = 0;
  const step_values* step = nullptr;  // device memory
  std::uint64_t seed = 0;             // the replica's seed (run_state::seed on the CPU)
};

template <class T>
struct always_false : std::false_type {};

// The primary template: no CUDA executor for this spec yet.
template <class Spec, class Layer, int Batch>
class cuda_executor {
  static_assert(always_false<Spec>::value,
                "model<Net, Policy, Strategy, cuda>: this layer has no CUDA executor yet. On tf::cuda a network "
                "may use dense (float32 policy), relu, tanh, sigmoid, gelu, gelu_tanh, dropout, layer_norm "
                "(with center and scale), flatten and reshape; see docs/architecture.md, \"CUDA backend\"");
};

// Layers whose work is none on either pass: the input, and views.
struct no_work_executor {
  explicit no_work_executor(const device_layer_io&) {}
  static constexpr std::size_t scratch_bytes() { return 0; }
  void forward(cudaStream_t, bool) {}
  void backward(cudaStream_t) {}
};

template <class DType, int... Dims, class Layer, int Batch>
class cuda_executor<typed_input<DType, Dims...>, Layer, Batch> : public no_work_executor {
  using no_work_executor::no_work_executor;
};
template <class Layer, int Batch>
class cuda_executor<flatten, Layer, Batch> : public no_work_executor {
  using no_work_executor::no_work_executor;
};
template <int... Dims, class Layer, int Batch>
class cuda_executor<reshape<Dims...>, Layer, Batch> : public no_work_executor {
  using no_work_executor::no_work_executor;
};

// dense: one cuBLASLt product forward with the bias (and a following relu)
// as its epilogue; backward, the kernel gradient with the bias gradient as
// its epilogue, then the input gradient.
template <int Units, class... Options, class Layer, int Batch>
class cuda_executor<dense<Units, Options...>, Layer, Batch> {
  static_assert(!Layer::low_precision && std::is_same_v<typename Layer::input_dtype, float32>,
                "model<Net, Policy, Strategy, cuda>: dense computes in float32 on tf::cuda so far; mixed "
                "policies (16-bit cuBLASLt products) are not wired into the CUDA model yet");
  using params = typename Layer::params;
  static constexpr int rows = Batch * static_cast<int>(Layer::rows_per_sample);
  static constexpr int units = Layer::units;
  static constexpr int in_features = Layer::in_features;
  static constexpr int kernel_stride = static_cast<int>(std::tuple_element_t<0, typename params::tuple>::row_stride);
  static constexpr epilogue fused = Layer::fused;
  static constexpr std::size_t output_count = static_cast<std::size_t>(rows) * units;

 public:
  explicit cuda_executor(const device_layer_io& io)
      : io_(io),
        forward_(io.lt, {rows, units, in_features, false, false, 0, kernel_stride}, gemm_precision::float32,
                 fused == epilogue::relu ? gemm_epilogue::relu_bias : gemm_epilogue::bias, false, false,
                 io.gemm_workspace_bytes),
        // d_kernel (in, units) = x^T (in, rows) · d_out (rows, units), and d_bias its column sums
        kernel_grad_(io.lt, {in_features, units, rows, true, false, 0, 0, kernel_stride}, gemm_precision::float32,
                     gemm_epilogue::bias_gradient, false, false, io.gemm_workspace_bytes),
        // d_in (rows, in) = d_out (rows, units) · kernel^T (units, in)
        input_grad_(io.lt, {rows, in_features, units, false, true, 0, kernel_stride}, gemm_precision::float32,
                    gemm_epilogue::none, false, false, io.gemm_workspace_bytes) {}

  static constexpr std::size_t scratch_bytes() { return 0; }

  void forward(cudaStream_t s, bool) {
    forward_.run(io_.in, kernel(), io_.out, bias(), nullptr, io_.gemm_workspace, s);
    // cuBLASLt has relu and gelu epilogues, not tanh or sigmoid: those run
    // in place right after (the activation layer's forward is a no-op).
    if constexpr (fused == epilogue::tanh)
      activation_forward<functors::tanh_fn>(io_.out, io_.out, output_count, s);
    else if constexpr (fused == epilogue::sigmoid)
      activation_forward<functors::sigmoid>(io_.out, io_.out, output_count, s);
  }

  void backward(cudaStream_t s) {
    kernel_grad_.run(io_.in, io_.d_out, io_.grads + params::template offset<0>, nullptr,
                     io_.grads + params::template offset<1>, io_.gemm_workspace, s);
    if (io_.d_in) input_grad_.run(io_.d_out, kernel(), io_.d_in, nullptr, nullptr, io_.gemm_workspace, s);
  }

 private:
  const float* kernel() const { return io_.params + params::template offset<0>; }
  const float* bias() const { return io_.params + params::template offset<1>; }

  device_layer_io io_;
  matmul forward_, kernel_grad_, input_grad_;
};

// Activations: the shared functors, forward (unless a dense took it over) and
// backward in place on the gradient.
// (Matched by the spec's functor: nvcc 13 does not deduce activation's
// fixed_string parameter in a partial specialization.)
template <class Spec, class Layer, int Batch>
  requires requires { typename Spec::functor; }
class cuda_executor<Spec, Layer, Batch> {
  using Functor = typename Spec::functor;
  static_assert(std::is_same_v<typename Layer::output_dtype, float32>,
                "model<Net, Policy, Strategy, cuda>: activations hold float32 on tf::cuda so far");
  static constexpr std::size_t count = static_cast<std::size_t>(Batch) * Layer::input_shape::size;

 public:
  explicit cuda_executor(const device_layer_io& io) : io_(io) {}
  static constexpr std::size_t scratch_bytes() { return 0; }

  void forward(cudaStream_t s, bool) {
    if constexpr (!Layer::fused) activation_forward<Functor>(io_.in, io_.out, count, s);
  }
  void backward(cudaStream_t s) {
    if (!io_.d_in) return;
    const float* from = Functor::derivative_from_output ? io_.out : io_.in;
    activation_backward<Functor>(from, io_.d_out, io_.d_in, count, s);
  }

 private:
  device_layer_io io_;
};

// dropout: the CPU layer's mask, bit for bit, drawn again in backward from
// the counter-based generator instead of being stored.
template <float Rate, class Layer, int Batch>
class cuda_executor<dropout<Rate>, Layer, Batch> {
  static_assert(std::is_same_v<typename Layer::output_dtype, float32>,
                "model<Net, Policy, Strategy, cuda>: dropout holds float32 on tf::cuda so far");
  static constexpr std::size_t count = static_cast<std::size_t>(Batch) * Layer::input_shape::size;

 public:
  explicit cuda_executor(const device_layer_io& io) : io_(io), seed_(mix_seed(io.seed, Layer::mask_salt)) {}
  static constexpr std::size_t scratch_bytes() { return 0; }

  void forward(cudaStream_t s, bool training) {
    training_ = training && Rate > 0.f;
    if (!training_) {
      if (io_.out != io_.in)
        TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(io_.out, io_.in, count * sizeof(float), cudaMemcpyDeviceToDevice, s));
      return;
    }
    dropout_forward(io_.in, io_.out, count, Rate, seed_, &io_.step->step, s);
  }
  void backward(cudaStream_t s) {
    if (!io_.d_in) return;
    if (!training_) {
      if (io_.d_in != io_.d_out)
        TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(io_.d_in, io_.d_out, count * sizeof(float), cudaMemcpyDeviceToDevice, s));
      return;
    }
    dropout_backward(io_.d_out, io_.d_in, count, Rate, seed_, &io_.step->step, s);
  }

 private:
  device_layer_io io_;
  std::uint64_t seed_;  // the mask's key, fixed per replica; the step comes from device memory
  bool training_ = false;
};

// layer_norm: fused forward and backward kernels; each row's mean and
// 1 / std kept in the workspace.
template <layer_norm_options Options, class... Initializers, class Layer, int Batch>
class cuda_executor<layer_normalization<Options, Initializers...>, Layer, Batch> {
  static_assert(Options.center && Options.scale,
                "model<Net, Policy, Strategy, cuda>: layer_norm on tf::cuda needs center and scale (the defaults)");
  static constexpr int rows = Batch * static_cast<int>(Layer::rows_per_sample);
  static constexpr int features = Layer::features;
  using params = typename Layer::params;

 public:
  explicit cuda_executor(const device_layer_io& io) : io_(io) {}
  static std::size_t scratch_bytes() { return layer_norm_backward_workspace_bytes(rows, features); }

  void forward(cudaStream_t s, bool) {
    layer_norm_forward(io_.in, gamma(), beta(), io_.out, mean(), inverse_std(), rows, features, Options.epsilon, s);
  }
  void backward(cudaStream_t s) {
    layer_norm_backward(io_.in, gamma(), mean(), inverse_std(), io_.d_out, io_.d_in, io_.grads + params::template offset<0>,
                        io_.grads + params::template offset<1>, rows, features, s,
                        reinterpret_cast<float*>(io_.scratch));
  }

 private:
  const float* gamma() const { return io_.params + params::template offset<0>; }
  const float* beta() const { return io_.params + params::template offset<1>; }
  float* mean() const { return reinterpret_cast<float*>(io_.workspace); }
  float* inverse_std() const { return reinterpret_cast<float*>(io_.workspace) + rows; }

  device_layer_io io_;
};

}  // namespace typeflow::backend::cuda

// Element-wise kernels: a generic map over functors with 16-byte vector
// loads and stores, the activations from core/functors.hpp, dropout with the
// CPU layer's mask, and float <-> 16-bit conversions.
//
// Storage types: float, typeflow::f16 / typeflow::bf16, __half /
// __nv_bfloat16; arithmetic is always in float (functors take and return
// float). 16-bit values convert with core/half.hpp's rules, so the bits
// equal the CPU's convert().
//
// Aliasing: an output may be the very same pointer as an input (in place);
// partly overlapping ranges are not allowed. Pointers need only their
// element's alignment: the kernels peel a scalar head until every pointer is
// 16-byte aligned (vector_plan.hpp), and run all-scalar when no such head
// exists (pointers misaligned differently).
//
// Every launch is asynchronous on `stream`, launches nothing when n == 0, and
// may be captured into a CUDA graph. Functors must be trivially copyable
// with a TYPEFLOW_HOST_DEVICE (or __device__) call operator.
//
// Declared here for any compiler. The kernels are in kernels/elementwise.cuh;
// nvcc compiles the combinations the layers, losses and engines use once,
// into typeflow::cuda's kernel library (src/cuda/elementwise.cu lists them).
// A .cu file of your own may include kernels/elementwise.cuh to map other
// functors.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "typeflow/core/functors.hpp"
#include "typeflow/core/half.hpp"
#include "typeflow/core/host_device.hpp"

namespace typeflow::backend::cuda {

inline constexpr unsigned elementwise_threads = 256;

namespace detail {

// 0: float, 1: f16, 2: bf16 (kernels/elementwise.cuh adds CUDA's __half and
// __nv_bfloat16).
template <class T>
inline constexpr int format_of = -1;
template <>
inline constexpr int format_of<float> = 0;
template <>
inline constexpr int format_of<typeflow::f16> = 1;
template <>
inline constexpr int format_of<typeflow::bf16> = 2;

template <class T>
concept storage = format_of<std::remove_cv_t<T>> >= 0;

}  // namespace detail

// out[i] = f(in[i]) for i < n.
template <detail::storage In, detail::storage Out, class F>
void map(const In* in, Out* out, std::size_t n, F f, cudaStream_t stream);

// out[i] = f(a[i], b[i]) for i < n.
template <detail::storage A, detail::storage B, detail::storage Out, class F>
void map2(const A* a, const B* b, Out* out, std::size_t n, F f, cudaStream_t stream);

// ---------------------------------------------------------------------------
// The functors the library maps (host and device code alike).

struct identity_fn {
  TYPEFLOW_HOST_DEVICE float operator()(float x) const { return x; }
};
struct scale_fn {
  float factor;
  TYPEFLOW_HOST_DEVICE float operator()(float x) const { return x * factor; }
};
// x times the float at `factor` in device memory, read when the kernel runs
// (a graph replays the pointer: each step reads its own loss scale).
struct multiply_by_device_value {
  const float* factor;
  TYPEFLOW_HOST_DEVICE float operator()(float x) const { return x * *factor; }
};
struct add_fn {
  TYPEFLOW_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};
template <class Functor>
struct activation_value_fn {
  TYPEFLOW_HOST_DEVICE float operator()(float x) const { return Functor{}.value(x); }
};
// dy * f'(.), f' from the output or the input as the functor defines it
// (layers/activations.hpp's backward).
template <class Functor>
struct activation_gradient_fn {
  TYPEFLOW_HOST_DEVICE float operator()(float from, float dy) const { return dy * functors::derivative<Functor>(from); }
};
// x as the nearest T value (ties to even; float16 overflows to infinity),
// held in float: precision::round_into's bits.
template <class T>
struct round_fn {
  TYPEFLOW_HOST_DEVICE float operator()(float x) const {
    if constexpr (std::is_same_v<T, typeflow::f16>)
      return typeflow::detail::f16_bits_to_float(typeflow::detail::float_to_f16_bits(x));
    else if constexpr (std::is_same_v<T, typeflow::bf16>)
      return typeflow::detail::bf16_to_float_portable(typeflow::detail::float_to_bf16_bits(x));
    else
      return x;
  }
};
// f(x), rounded to T: a fused tanh / sigmoid on a 16-bit dense's float32 output.
template <class Functor, class T>
struct activation_rounded_fn {
  TYPEFLOW_HOST_DEVICE float operator()(float x) const { return round_fn<T>{}(Functor{}.value(x)); }
};

// float -> 16 bits, round to nearest even (core/half.hpp's bits).
template <detail::storage T>
  requires(sizeof(T) == 2)
void to_16bit(const float* in, T* out, std::size_t n, cudaStream_t stream) {
  map(in, out, n, identity_fn{}, stream);
}
// 16 bits -> float, exact.
template <detail::storage T>
  requires(sizeof(T) == 2)
void from_16bit(const T* in, float* out, std::size_t n, cudaStream_t stream) {
  map(in, out, n, identity_fn{}, stream);
}

// Rows of bf16 values, row_stride apart, into rows x width packed floats at
// `to`: device memory, or pinned host memory (cudaMallocHost's, which the
// device writes through unified addressing; read it after the stream is
// done). A GPU head's bf16 logits for the host: predict, generate, and the
// metrics the device does not count (layers/embedding.hpp).
void bf16_rows_to_float(const typeflow::bf16* from, float* to, int rows, int width, int row_stride,
                        cudaStream_t stream);

// x *= factor, in place.
inline void scale(float* x, std::size_t n, float factor, cudaStream_t stream) { map(x, x, n, scale_fn{factor}, stream); }

// y = f(x). y may be x.
template <class Functor, detail::storage In, detail::storage Out>
void activation_forward(const In* x, Out* y, std::size_t n, cudaStream_t stream) {
  map(x, y, n, activation_value_fn<Functor>{}, stream);
}

// dx = dy * f'(.): from_values is y when Functor::derivative_from_output,
// else x (in their storage type); gradients are float. dx may be dy.
template <class Functor, detail::storage T>
void activation_backward(const T* from_values, const float* dy, float* dx, std::size_t n, cudaStream_t stream) {
  map2(from_values, dy, dx, n, activation_gradient_fn<Functor>{}, stream);
}

// ---------------------------------------------------------------------------
// Dropout: layers/dropout.hpp's mask (layers/dropout_mask.hpp), drawn again
// in backward from the same (seed, step) instead of kept.

struct dropout_draw {
  std::uint64_t layer_seed = 0;  // dropout_seed(run_state::seed, layer_io::salt)
  std::uint64_t step = 0;        // run_state::step
  // When set, the step is read from here when the kernel runs (so each replay
  // of a captured graph draws that step's mask); `step` is then ignored.
  const std::uint64_t* device_step = nullptr;
};

// Training-mode dropout: y = keep ? x / (1 - rate) : 0. keep (nullable) gets
// the CPU layer's byte mask (1 kept, 0 dropped), for tests and inspection;
// backward does not need it. y may be x. Rate 0 copies (as the CPU layer).
// In evaluation call nothing (or copy): dropout is the identity there.
template <detail::storage T>
void dropout_forward(const T* x, T* y, std::uint8_t* keep, std::size_t n, float rate, dropout_draw draw,
                     cudaStream_t stream);

// dx = keep ? dy / (1 - rate) : 0 with the mask forward drew for the same
// draw: the forward itself, applied to the gradient. dx may be dy.
inline void dropout_backward(const float* dy, float* dx, std::size_t n, float rate, dropout_draw draw,
                             cudaStream_t stream) {
  dropout_forward(dy, dx, nullptr, n, rate, draw, stream);
}

// The graph-ready short forms: no mask written, the step read from device
// memory when the kernel runs.
template <detail::storage T>
void dropout_forward(const T* x, T* y, std::size_t n, float rate, std::uint64_t layer_seed,
                     const std::uint64_t* device_step, cudaStream_t stream) {
  dropout_forward(x, y, nullptr, n, rate, dropout_draw{layer_seed, 0, device_step}, stream);
}
inline void dropout_backward(const float* dy, float* dx, std::size_t n, float rate, std::uint64_t layer_seed,
                             const std::uint64_t* device_step, cudaStream_t stream) {
  dropout_backward(dy, dx, n, rate, dropout_draw{layer_seed, 0, device_step}, stream);
}

// ---------------------------------------------------------------------------
// A trivially copyable value written into device memory in stream order, as
// a kernel argument: no staging buffer whose reuse could race an earlier
// asynchronous copy. For the per-step values a captured graph reads (dropout
// steps, optimizer step tables): enqueue this before each graph launch.

inline constexpr std::size_t device_value_most_bytes = 4000;  // kernel arguments are limited to 4 KiB

// bytes (at most device_value_most_bytes) from host memory at `from` to
// device memory at `destination`, by one kernel's argument.
void set_device_bytes(void* destination, const void* from, std::size_t bytes, cudaStream_t stream);

template <class T>
  requires std::is_trivially_copyable_v<T>
void set_device_value(T* destination, const T& value, cudaStream_t stream) {
  static_assert(sizeof(T) <= device_value_most_bytes, "set_device_value: kernel arguments are limited to 4 KiB");
  set_device_bytes(destination, &value, sizeof(T), stream);
}

}  // namespace typeflow::backend::cuda

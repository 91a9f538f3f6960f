// backend/cuda/elementwise.hpp's kernels, compiled once (typeflow::cuda's
// kernel library) for every combination the layers, losses, optimizers and
// engines launch: conversions between float, float16 and bfloat16; the five
// activations (forward in each storage type, backward from each); the
// rounding and scaling maps of the mixed-precision dense and the loss
// scale; dropout in each storage type; and set_device_bytes. A program that
// maps a functor of its own includes kernels/elementwise.cuh in a .cu file.
#include "typeflow/backend/cuda/kernels/elementwise.cuh"

#include <cstring>

namespace typeflow::backend::cuda {

namespace {
template <class T>
__global__ void store_bytes_kernel(T payload, void* destination, std::size_t bytes) {
  const auto* from = reinterpret_cast<const unsigned char*>(&payload);
  auto* to = static_cast<unsigned char*>(destination);
  for (std::size_t i = threadIdx.x; i < bytes; i += blockDim.x) to[i] = from[i];
}
struct payload {
  unsigned char bytes[device_value_most_bytes];
};
}  // namespace

void set_device_bytes(void* destination, const void* from, std::size_t bytes, cudaStream_t stream) {
  if (bytes > device_value_most_bytes)
    throw std::invalid_argument("typeflow cuda set_device_bytes: at most " + std::to_string(device_value_most_bytes) +
                                " bytes go in a kernel argument (got " + std::to_string(bytes) + ")");
  if (bytes == 0) return;
  payload p;
  std::memcpy(p.bytes, from, bytes);
  store_bytes_kernel<<<1, 128, 0, stream>>>(p, destination, bytes);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

namespace {
__global__ void bf16_rows_kernel(const typeflow::bf16* from, float* to, std::size_t count, std::size_t width,
                                 std::size_t row_stride) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    to[i] = static_cast<float>(from[i / width * row_stride + i % width]);
}
}  // namespace

void bf16_rows_to_float(const typeflow::bf16* from, float* to, int rows, int width, int row_stride,
                        cudaStream_t stream) {
  if (rows < 0 || width <= 0 || row_stride < width)
    throw std::invalid_argument("typeflow cuda bf16_rows_to_float: needs rows >= 0 and 0 < width <= row_stride, got " +
                                std::to_string(rows) + ", " + std::to_string(width) + ", " +
                                std::to_string(row_stride));
  const std::size_t count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(width);
  if (count == 0) return;
  bf16_rows_kernel<<<blocks_for(count, elementwise_threads), elementwise_threads, 0, stream>>>(
      from, to, count, static_cast<std::size_t>(width), static_cast<std::size_t>(row_stride));
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

using typeflow::bf16;
using typeflow::f16;
namespace fn = typeflow::functors;

#define TYPEFLOW_MAP(In, Out, ...) \
  template void map<In, Out, __VA_ARGS__>(const In*, Out*, std::size_t, __VA_ARGS__, cudaStream_t);
#define TYPEFLOW_MAP2(A, B, Out, ...) \
  template void map2<A, B, Out, __VA_ARGS__>(const A*, const B*, Out*, std::size_t, __VA_ARGS__, cudaStream_t);

// Conversions (and copies) between every pair of storage types.
#define TYPEFLOW_CONVERSIONS_FROM(In) \
  TYPEFLOW_MAP(In, float, identity_fn) TYPEFLOW_MAP(In, f16, identity_fn) TYPEFLOW_MAP(In, bf16, identity_fn)
TYPEFLOW_CONVERSIONS_FROM(float)
TYPEFLOW_CONVERSIONS_FROM(f16)
TYPEFLOW_CONVERSIONS_FROM(bf16)

// Scaling, the loss scale read from device memory, and a sum in place.
TYPEFLOW_MAP(float, float, scale_fn)
TYPEFLOW_MAP(float, float, multiply_by_device_value)
TYPEFLOW_MAP2(float, float, float, add_fn)

// Rounding to a 16-bit compute dtype, held in float.
TYPEFLOW_MAP(float, float, round_fn<f16>)
TYPEFLOW_MAP(float, float, round_fn<bf16>)

// Each activation: forward in each storage type, forward rounded to a 16-bit
// dtype in float, and backward from each storage type.
#define TYPEFLOW_ACTIVATION(F)                                                                   \
  TYPEFLOW_MAP(float, float, activation_value_fn<F>)                                             \
  TYPEFLOW_MAP(f16, f16, activation_value_fn<F>)                                                 \
  TYPEFLOW_MAP(bf16, bf16, activation_value_fn<F>)                                               \
  TYPEFLOW_MAP(float, float, activation_rounded_fn<F, f16>)                                      \
  TYPEFLOW_MAP(float, float, activation_rounded_fn<F, bf16>)                                     \
  TYPEFLOW_MAP2(float, float, float, activation_gradient_fn<F>)                                  \
  TYPEFLOW_MAP2(f16, float, float, activation_gradient_fn<F>)                                    \
  TYPEFLOW_MAP2(bf16, float, float, activation_gradient_fn<F>)
TYPEFLOW_ACTIVATION(fn::relu)
TYPEFLOW_ACTIVATION(fn::tanh_fn)
TYPEFLOW_ACTIVATION(fn::sigmoid)
TYPEFLOW_ACTIVATION(fn::gelu_exact)
TYPEFLOW_ACTIVATION(fn::gelu_tanh)
// A dense's fused gelu_tanh backward: from the product as stored, d_out
// times gelu', in the product's dtype (backend/cuda/layers.hpp).
TYPEFLOW_MAP2(float, float, f16, activation_gradient_fn<fn::gelu_tanh>)
TYPEFLOW_MAP2(float, float, bf16, activation_gradient_fn<fn::gelu_tanh>)
TYPEFLOW_MAP2(f16, float, f16, activation_gradient_fn<fn::gelu_tanh>)
TYPEFLOW_MAP2(bf16, float, bf16, activation_gradient_fn<fn::gelu_tanh>)

#define TYPEFLOW_DROPOUT(T) \
  template void dropout_forward<T>(const T*, T*, std::uint8_t*, std::size_t, float, dropout_draw, cudaStream_t);
TYPEFLOW_DROPOUT(float)
TYPEFLOW_DROPOUT(f16)
TYPEFLOW_DROPOUT(bf16)

}  // namespace typeflow::backend::cuda

// The kernels of backend/cuda/elementwise.hpp: its map, map2 and
// dropout_forward templates' definitions. src/cuda/elementwise.cu
// instantiates the combinations typeflow uses, once, in typeflow::cuda's
// kernel library; a .cu file of your own may include this header to map
// functors of its own (template instantiations may coexist with the
// library's).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "typeflow/backend/cuda/elementwise.hpp"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/backend/cuda/vector_plan.hpp"
#include "typeflow/core/functors.hpp"
#include "typeflow/core/half.hpp"
#include "typeflow/core/random.hpp"
#include "typeflow/layers/dropout_mask.hpp"

namespace typeflow::backend::cuda {

namespace detail {

// CUDA's own 16-bit types store the same bits.
template <>
inline constexpr int format_of<__half> = 1;
template <>
inline constexpr int format_of<__nv_bfloat16> = 2;

template <int Format>
__device__ __forceinline__ float bits_to_float(std::uint16_t b) {
  if constexpr (Format == 1)
    return typeflow::detail::f16_bits_to_float(b);
  else
    return typeflow::detail::bf16_to_float_portable(b);
}
template <int Format>
__device__ __forceinline__ std::uint16_t float_to_bits(float x) {
  if constexpr (Format == 1)
    return typeflow::detail::float_to_f16_bits(x);
  else
    return typeflow::detail::float_to_bf16_bits(x);
}

template <class T>
__device__ __forceinline__ float load_scalar(const T* p) {
  constexpr int format = format_of<std::remove_cv_t<T>>;
  if constexpr (format == 0)
    return *p;
  else
    return bits_to_float<format>(*reinterpret_cast<const std::uint16_t*>(p));
}
template <class T>
__device__ __forceinline__ void store_scalar(T* p, float x) {
  constexpr int format = format_of<T>;
  if constexpr (format == 0)
    *p = x;
  else
    *reinterpret_cast<std::uint16_t*>(p) = float_to_bits<format>(x);
}

// W elements from a 16-byte-aligned p, as W * sizeof(T) / 16 vector loads.
template <int W, class T>
__device__ __forceinline__ void load_vector(const T* p, float (&x)[W]) {
  constexpr int format = format_of<std::remove_cv_t<T>>;
  if constexpr (format == 0) {
    static_assert(W % 4 == 0);
#pragma unroll
    for (int k = 0; k < W / 4; ++k) {
      const float4 v = reinterpret_cast<const float4*>(p)[k];
      x[4 * k] = v.x, x[4 * k + 1] = v.y, x[4 * k + 2] = v.z, x[4 * k + 3] = v.w;
    }
  } else {
    static_assert(W % 8 == 0);
#pragma unroll
    for (int k = 0; k < W / 8; ++k) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[k];
      const std::uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // little-endian: the lower half is the lower element
        x[8 * k + 2 * j] = bits_to_float<format>(static_cast<std::uint16_t>(words[j]));
        x[8 * k + 2 * j + 1] = bits_to_float<format>(static_cast<std::uint16_t>(words[j] >> 16));
      }
    }
  }
}
template <int W, class T>
__device__ __forceinline__ void store_vector(T* p, const float (&x)[W]) {
  constexpr int format = format_of<T>;
  if constexpr (format == 0) {
    static_assert(W % 4 == 0);
#pragma unroll
    for (int k = 0; k < W / 4; ++k)
      reinterpret_cast<float4*>(p)[k] = make_float4(x[4 * k], x[4 * k + 1], x[4 * k + 2], x[4 * k + 3]);
  } else {
    static_assert(W % 8 == 0);
#pragma unroll
    for (int k = 0; k < W / 8; ++k) {
      std::uint32_t words[4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        words[j] = std::uint32_t{float_to_bits<format>(x[8 * k + 2 * j])} |
                   (std::uint32_t{float_to_bits<format>(x[8 * k + 2 * j + 1])} << 16);
      reinterpret_cast<uint4*>(p)[k] = make_uint4(words[0], words[1], words[2], words[3]);
    }
  }
}

// Elements per vector step: 16 bytes of the narrowest type.
template <class... T>
inline constexpr int vector_width = static_cast<int>(vector_bytes / std::min({sizeof(T)...}));

__device__ __forceinline__ std::size_t thread_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t thread_count() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

template <class In, class Out, class F>
__global__ void map_kernel(const In* in, Out* out, vector_plan plan, F f) {
  constexpr int W = vector_width<In, Out>;
  const std::size_t first = thread_index(), stride = thread_count();
  for (std::size_t v = first; v < plan.vectors; v += stride) {
    const std::size_t e = plan.vector_index(v);
    float x[W];
    load_vector<W>(in + e, x);
#pragma unroll
    for (int k = 0; k < W; ++k) x[k] = f(x[k]);
    store_vector<W>(out + e, x);
  }
  for (std::size_t j = first; j < plan.scalars(); j += stride) {
    const std::size_t e = plan.scalar_index(j);
    store_scalar(out + e, f(load_scalar(in + e)));
  }
}

template <class A, class B, class Out, class F>
__global__ void map2_kernel(const A* a, const B* b, Out* out, vector_plan plan, F f) {
  constexpr int W = vector_width<A, B, Out>;
  const std::size_t first = thread_index(), stride = thread_count();
  for (std::size_t v = first; v < plan.vectors; v += stride) {
    const std::size_t e = plan.vector_index(v);
    float x[W], y[W];
    load_vector<W>(a + e, x);
    load_vector<W>(b + e, y);
#pragma unroll
    for (int k = 0; k < W; ++k) x[k] = f(x[k], y[k]);
    store_vector<W>(out + e, x);
  }
  for (std::size_t j = first; j < plan.scalars(); j += stride) {
    const std::size_t e = plan.scalar_index(j);
    store_scalar(out + e, f(load_scalar(a + e), load_scalar(b + e)));
  }
}

template <class T>
pointer_alignment alignment_of(const T* p) {
  return {reinterpret_cast<std::uintptr_t>(p), sizeof(T)};
}

}  // namespace detail

template <detail::storage In, detail::storage Out, class F>
void map(const In* in, Out* out, std::size_t n, F f, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int W = detail::vector_width<In, Out>;
  const vector_plan plan = split_vectorised(n, W, {detail::alignment_of(in), detail::alignment_of(out)});
  detail::map_kernel<<<blocks_for(plan.items(), elementwise_threads), elementwise_threads, 0, stream>>>(in, out, plan, f);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

template <detail::storage A, detail::storage B, detail::storage Out, class F>
void map2(const A* a, const B* b, Out* out, std::size_t n, F f, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int W = detail::vector_width<A, B, Out>;
  const vector_plan plan =
      split_vectorised(n, W, {detail::alignment_of(a), detail::alignment_of(b), detail::alignment_of(out)});
  detail::map2_kernel<<<blocks_for(plan.items(), elementwise_threads), elementwise_threads, 0, stream>>>(a, b, out,
                                                                                                          plan, f);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------
// Dropout's kernel.

namespace detail {

// 4 elements from a 4 * sizeof(T)-aligned p.
template <class T>
__device__ __forceinline__ void load4(const T* p, float (&x)[4]) {
  constexpr int format = format_of<std::remove_cv_t<T>>;
  if constexpr (format == 0) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    x[0] = bits_to_float<format>(static_cast<std::uint16_t>(v.x));
    x[1] = bits_to_float<format>(static_cast<std::uint16_t>(v.x >> 16));
    x[2] = bits_to_float<format>(static_cast<std::uint16_t>(v.y));
    x[3] = bits_to_float<format>(static_cast<std::uint16_t>(v.y >> 16));
  }
}
template <class T>
__device__ __forceinline__ void store4(T* p, const float (&x)[4]) {
  constexpr int format = format_of<T>;
  if constexpr (format == 0) {
    *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
  } else {
    *reinterpret_cast<uint2*>(p) =
        make_uint2(std::uint32_t{float_to_bits<format>(x[0])} | (std::uint32_t{float_to_bits<format>(x[1])} << 16),
                   std::uint32_t{float_to_bits<format>(x[2])} | (std::uint32_t{float_to_bits<format>(x[3])} << 16));
  }
}

__device__ __forceinline__ dropout_mask device_mask(const dropout_draw& draw, std::uint32_t threshold, float scale) {
  return {random_stream{draw.layer_seed, draw.device_step ? *draw.device_step : draw.step}, threshold, scale};
}

// Thread per Philox block (4 elements, one draw). vector: x, y (and keep)
// are aligned for 4-element accesses, so every whole block is one access.
template <class T>
__global__ void dropout_forward_kernel(const T* x, T* y, std::uint8_t* keep, std::size_t n, dropout_draw draw,
                                       std::uint32_t threshold, float scale, bool vector) {
  const dropout_mask mask = device_mask(draw, threshold, scale);
  const std::size_t blocks = (n + 3) / 4;
  for (std::size_t b = thread_index(); b < blocks; b += thread_count()) {
    bool k[4];
    mask.keep4(b, k);
    const std::size_t e = 4 * b;
    if (vector && e + 4 <= n) {
      float v[4];
      load4(x + e, v);
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = k[j] ? v[j] * scale : 0.f;
      store4(y + e, v);
      if (keep) *reinterpret_cast<uchar4*>(keep + e) = make_uchar4(k[0], k[1], k[2], k[3]);
    } else {
      for (int j = 0; j < 4 && e + j < n; ++j) {
        store_scalar(y + e + j, k[j] ? load_scalar(x + e + j) * scale : 0.f);
        if (keep) keep[e + j] = k[j];
      }
    }
  }
}

inline void check_dropout_rate(float rate) {
  if (!(rate >= 0.f && rate < 1.f))
    throw std::invalid_argument("typeflow cuda dropout: rate must lie in [0, 1) (got " + std::to_string(rate) + ")");
}

inline bool aligned_to(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

}  // namespace detail

template <detail::storage T>
void dropout_forward(const T* x, T* y, std::uint8_t* keep, std::size_t n, float rate, dropout_draw draw,
                     cudaStream_t stream) {
  detail::check_dropout_rate(rate);
  if (n == 0) return;
  if (rate == 0.f) {
    if (x != y) TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(y, x, n * sizeof(T), cudaMemcpyDeviceToDevice, stream));
    if (keep) TYPEFLOW_CUDA_CHECK(cudaMemsetAsync(keep, 1, n, stream));
    return;
  }
  const bool vector = detail::aligned_to(x, 4 * sizeof(T)) && detail::aligned_to(y, 4 * sizeof(T)) &&
                      (!keep || detail::aligned_to(keep, 4));
  detail::dropout_forward_kernel<<<blocks_for((n + 3) / 4, elementwise_threads), elementwise_threads, 0, stream>>>(
      x, y, keep, n, draw, dropout_threshold(rate), dropout_scale(rate), vector);
  TYPEFLOW_CUDA_CHECK_LAUNCH();
}

}  // namespace typeflow::backend::cuda

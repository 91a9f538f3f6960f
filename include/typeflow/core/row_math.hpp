// Per-row arithmetic that the CPU code and the CUDA kernels share:
//
//   max_sum   (running max, sum of exp(z - max)): a stable softmax / log-sum-exp
//   mean_m2   (count, mean, sum of squared deviations): layer_norm's statistics
//   sum_pair  two plain sums reduced together
//
// and the per-element formulas that use them (softmax, sparse cross-entropy
// from logits or from probabilities, layer_norm forward and backward), written
// exactly as losses/losses.hpp and layers/layer_norm.hpp compute them.
//
// Each *_merge is associative up to rounding: a row may be split across
// threads and merged in any grouping (tests/unit/row_math_test.cpp checks that
// against double-precision sums). Merges are not bitwise commutative, so the
// device reductions below always pass the lower lanes' value first, which
// leaves every lane of a group with the same bits.
//
// Under nvcc the second half adds the device side: warp and block reductions
// over these types, and how a row is spread over a group of threads.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "typeflow/core/half.hpp"
#include "typeflow/core/host_device.hpp"

namespace typeflow::row_math {

// ---------------------------------------------------------------------------
// Softmax: (max, sum of exp(z - max)); the empty row is (-inf, 0).

struct max_sum {
  float max;
  float sum;
};

TYPEFLOW_HOST_DEVICE max_sum max_sum_empty() { return {-INFINITY, 0.f}; }

// One more element, one exp. z == max takes 1 directly so that -inf elements
// (masked logits) give exp(-inf - finite) = 0 later instead of a NaN now; a
// NaN z never becomes the max (z > max is false) but makes the sum NaN.
TYPEFLOW_HOST_DEVICE max_sum max_sum_push(max_sum a, float z) {
  if (z > a.max) return {z, a.sum * std::exp(a.max - z) + 1.f};
  return {a.max, a.sum + (z == a.max ? 1.f : std::exp(z - a.max))};
}

// Neither max is ever NaN (push never stores one), so a plain compare picks
// the larger; a side whose max is the result is scaled by exactly 1, which
// also keeps (-inf, s) merges free of inf - inf.
TYPEFLOW_HOST_DEVICE max_sum max_sum_merge(max_sum a, max_sum b) {
  const float m = a.max > b.max ? a.max : b.max;
  const float scale_a = a.max == m ? 1.f : std::exp(a.max - m);
  const float scale_b = b.max == m ? 1.f : std::exp(b.max - m);
  return {m, a.sum * scale_a + b.sum * scale_b};
}

TYPEFLOW_HOST_DEVICE float log_sum_exp(max_sum a) { return a.max + std::log(a.sum); }

// layers/softmax.hpp's softmax_row: exp(z - max) times 1 / sum.
TYPEFLOW_HOST_DEVICE float softmax_probability(float z, float max, float inverse_sum) {
  return std::exp(z - max) * inverse_sum;
}

// The softmax layer's backward at one element: d_in = y * (d_out - dot),
// dot = Σ_j d_out[j] * y[j] over the row.
TYPEFLOW_HOST_DEVICE float softmax_input_gradient(float y, float d_out, float dot) { return y * (d_out - dot); }

// losses.hpp's sparse_categorical_crossentropy{from_logits = true}: the row's
// loss lse - z[y], and each element's (softmax(z) - onehot(y)) * scale.
TYPEFLOW_HOST_DEVICE float softmax_cross_entropy_loss(float label_logit, float lse) { return lse - label_logit; }
TYPEFLOW_HOST_DEVICE float softmax_cross_entropy_gradient(float z, float lse, bool is_label, float scale) {
  const float g = std::exp(z - lse) * scale;
  return is_label ? g - scale : g;
}

// The from-probabilities form: -log(clip(p[y] / sum(p))), clipped as Keras
// does into [epsilon, 1 - epsilon]; equal to losses::detail::probability_epsilon
// (row_math_test.cpp checks).
inline constexpr float probability_epsilon = 1e-7f;

// Row gradient: every element gets `shared`, the label's gets shared - label_extra;
// both are zero where the clip holds (the loss is flat there).
struct probability_loss {
  float loss;
  float shared;
  float label_extra;
};

TYPEFLOW_HOST_DEVICE probability_loss sparse_probability_loss(float label_probability, float sum, float scale) {
  const float q = label_probability / sum;
  // std::clamp's order of comparisons, so that a NaN q stays NaN.
  const float clipped =
      q < probability_epsilon ? probability_epsilon : (1.f - probability_epsilon < q ? 1.f - probability_epsilon : q);
  const bool inside = q == clipped;
  return {-std::log(clipped), inside ? scale / sum : 0.f, inside ? scale / label_probability : 0.f};
}

// ---------------------------------------------------------------------------
// layer_norm: Welford per element, Chan et al. to merge. The count is a float
// (exact to 2^24 elements, far beyond a row).

struct mean_m2 {
  float count;
  float mean;
  float m2;  // sum of squared deviations from mean
};

TYPEFLOW_HOST_DEVICE mean_m2 mean_m2_empty() { return {0.f, 0.f, 0.f}; }

TYPEFLOW_HOST_DEVICE mean_m2 mean_m2_push(mean_m2 a, float x) {
  const float count = a.count + 1.f;
  const float delta = x - a.mean;
  const float mean = a.mean + delta / count;
  return {count, mean, a.m2 + delta * (x - mean)};  // both factors share a sign: m2 never decreases
}

// Empty sides return the other exactly, so padding lanes change nothing.
TYPEFLOW_HOST_DEVICE mean_m2 mean_m2_merge(mean_m2 a, mean_m2 b) {
  if (b.count == 0.f) return a;
  if (a.count == 0.f) return b;
  const float count = a.count + b.count;
  const float delta = b.mean - a.mean;
  const float share = b.count / count;
  return {count, a.mean + delta * share, a.m2 + b.m2 + delta * delta * a.count * share};
}

// 1 / sqrt(biased variance + epsilon), the last step in double as the CPU layer does.
TYPEFLOW_HOST_DEVICE float layer_norm_inverse_std(mean_m2 s, float epsilon) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.m2) / static_cast<double>(s.count) +
                                            static_cast<double>(epsilon)));
}

TYPEFLOW_HOST_DEVICE float layer_norm_normalize(float x, float mean, float inverse_std) {
  return (x - mean) * inverse_std;
}

// gamma = 1 and beta = 0 stand for "no scale" and "no center" exactly.
TYPEFLOW_HOST_DEVICE float layer_norm_output(float normalized, float gamma, float beta) {
  return gamma * normalized + beta;
}

// d_in given g = d_out * gamma, x̂, and the row's means of g and g * x̂.
TYPEFLOW_HOST_DEVICE float layer_norm_input_gradient(float g, float normalized, float inverse_std, float mean_g,
                                                     float mean_g_normalized) {
  return inverse_std * (g - mean_g - normalized * mean_g_normalized);
}

// ---------------------------------------------------------------------------

struct sum_pair {
  float first;
  float second;
};

TYPEFLOW_HOST_DEVICE sum_pair sum_pair_merge(sum_pair a, sum_pair b) {
  return {a.first + b.first, a.second + b.second};
}

// The merges as function objects, for the reductions.
struct max_sum_merger {
  TYPEFLOW_HOST_DEVICE max_sum operator()(max_sum a, max_sum b) const { return max_sum_merge(a, b); }
};
struct mean_m2_merger {
  TYPEFLOW_HOST_DEVICE mean_m2 operator()(mean_m2 a, mean_m2 b) const { return mean_m2_merge(a, b); }
};
struct sum_pair_merger {
  TYPEFLOW_HOST_DEVICE sum_pair operator()(sum_pair a, sum_pair b) const { return sum_pair_merge(a, b); }
};
struct plus {
  template <class T>
  TYPEFLOW_HOST_DEVICE T operator()(T a, T b) const {
    return a + b;
  }
};

// What every thread of a group ends with after gpu::group_reduce over the
// per-thread values v[0, threads) (threads: 32, or a multiple of 32 up to
// 1024): within each warp, neighbours merged pairwise, then pairs of pairs;
// then the same over the warps' results, padded to 32 with `empty`. For the
// CPU tests, which replay the kernels' order on the host.
template <class T, class Merge>
T group_reduce_reference(const T* v, int threads, T empty, Merge merge) {
  auto tree = [&](const T* lanes) {
    T level[32];
    for (int i = 0; i < 32; ++i) level[i] = lanes[i];
    for (int width = 32; width > 1; width /= 2)
      for (int i = 0; i < width / 2; ++i) level[i] = merge(level[2 * i], level[2 * i + 1]);
    return level[0];
  };
  if (threads == 32) return tree(v);
  T warps[32];
  for (int w = 0; w < 32; ++w) warps[w] = w < threads / 32 ? tree(v + 32 * w) : empty;
  return tree(warps);
}

}  // namespace typeflow::row_math

#if defined(__CUDACC__)

namespace typeflow::row_math::gpu {

// Floats per thread a row keeps in registers; rows up to 1024 * kPer wide are
// held whole by one group, wider ones are streamed from memory twice.
inline constexpr int kPer = 8;
inline constexpr int kWidestHeld = 1024 * kPer;

// The threads that share one row: 32 (a warp) up to 1024 (a block), or 0 for
// a streamed row (a 1024-thread block).
inline int group_for(int n) {
  for (int group = 32; group <= 1024; group *= 2)
    if (n <= group * kPer) return group;
  return 0;
}

// Blocks of warp groups hold 4 rows; wider groups are the whole block.
template <int kGroup>
inline constexpr int block_threads = kGroup == 0 ? 1024 : (kGroup == 32 ? 128 : kGroup);
template <int kGroup>
inline constexpr int rows_per_block = kGroup == 0 ? 1 : block_threads<kGroup> / kGroup;
// Shared slots for a block reduction: one per warp (at least one, so the array exists).
template <int kGroup>
inline constexpr int slot_count = kGroup == 32 ? 1 : block_threads<kGroup> / 32;

// Whether every non-null pointer is 16-byte aligned (float4 access).
inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }
template <class... P>
bool all_aligned16(const P*... p) {
  return ((p == nullptr || aligned16(p)) && ...);
}

__device__ __forceinline__ float shuffle_xor(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ __forceinline__ double shuffle_xor(double v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ __forceinline__ max_sum shuffle_xor(max_sum v, int mask) {
  return {shuffle_xor(v.max, mask), shuffle_xor(v.sum, mask)};
}
__device__ __forceinline__ mean_m2 shuffle_xor(mean_m2 v, int mask) {
  return {shuffle_xor(v.count, mask), shuffle_xor(v.mean, mask), shuffle_xor(v.m2, mask)};
}
__device__ __forceinline__ sum_pair shuffle_xor(sum_pair v, int mask) {
  return {shuffle_xor(v.first, mask), shuffle_xor(v.second, mask)};
}

// All 32 lanes must call it (full mask). The lane whose `offset` bit is clear
// holds the lower lanes' part and goes first: one merge call on selected
// operands, so both partners run the same instructions on the same values and
// end with the same bits (group_reduce_reference's tree).
template <class T, class Merge>
__device__ __forceinline__ T warp_reduce(T v, Merge merge) {
  const unsigned lane = threadIdx.x & 31u;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const T other = shuffle_xor(v, offset);
    const bool upper = (lane & static_cast<unsigned>(offset)) != 0;
    v = merge(upper ? other : v, upper ? v : other);
  }
  return v;
}

// A reduction over one group, every thread getting the result. kGroup 32: the
// calling warp. Larger: the whole (1-D) block, every thread of which must call
// it the same number of times; `slots` holds slot_count<kGroup> shared values.
template <int kGroup, class T, class Merge>
__device__ __forceinline__ T group_reduce(T v, T empty, Merge merge, T* slots) {
  v = warp_reduce(v, merge);
  if constexpr (kGroup != 32) {
    constexpr int warps = block_threads<kGroup> / 32;
    const unsigned lane = threadIdx.x & 31u;
    __syncthreads();  // the previous reduction's readers are done with slots
    if (lane == 0) slots[threadIdx.x >> 5] = v;
    __syncthreads();
    v = warp_reduce(lane < static_cast<unsigned>(warps) ? slots[lane] : empty, merge);
  }
  return v;
}

// 4 consecutive values (one 16- or 8-byte access) or 1, held as floats:
// stored as float, or as bf16 (a GPU's logits under mixed_bfloat16,
// layers/embedding.hpp), converted as core/half.hpp converts.
template <bool kVec, class T = float>
struct chunk {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, typeflow::bf16>);
  static constexpr int width = kVec ? 4 : 1;
  float v[width];

  __device__ __forceinline__ static chunk load(const T* p) {
    chunk c;
    if constexpr (std::is_same_v<T, typeflow::bf16>) {
      if constexpr (kVec) {
        const uint2 q = *reinterpret_cast<const uint2*>(p);
        const unsigned words[2] = {q.x, q.y};
#pragma unroll
        for (int e = 0; e < 4; ++e)
          c.v[e] = typeflow::detail::bf16_to_float_portable(static_cast<std::uint16_t>(words[e / 2] >> (16 * (e % 2))));
      } else {
        c.v[0] = static_cast<float>(*p);
      }
    } else if constexpr (kVec) {
      const float4 q = *reinterpret_cast<const float4*>(p);
      c.v[0] = q.x, c.v[1] = q.y, c.v[2] = q.z, c.v[3] = q.w;
    } else {
      c.v[0] = *p;
    }
    return c;
  }
  __device__ __forceinline__ static chunk filled(float value) {
    chunk c;
#pragma unroll
    for (int e = 0; e < width; ++e) c.v[e] = value;
    return c;
  }
  __device__ __forceinline__ void store(T* p) const {
    if constexpr (std::is_same_v<T, typeflow::bf16>) {
      if constexpr (kVec) {
        unsigned words[2];
#pragma unroll
        for (int w = 0; w < 2; ++w)
          words[w] = static_cast<unsigned>(typeflow::detail::float_to_bf16_bits(v[2 * w])) |
                     static_cast<unsigned>(typeflow::detail::float_to_bf16_bits(v[2 * w + 1])) << 16;
        *reinterpret_cast<uint2*>(p) = make_uint2(words[0], words[1]);
      } else {
        *p = typeflow::bf16(v[0]);
      }
    } else if constexpr (kVec) {
      *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
      *p = v[0];
    }
  }
  // The first `count` values alone, one at a time: a padded row's last
  // chunk, whose padding columns are left as they are.
  __device__ __forceinline__ void store_first(T* p, int count) const {
#pragma unroll
    for (int e = 0; e < width; ++e)
      if (e < count) p[e] = T(v[e]);
  }
  // Where a chunk at column j of a row of n ends inside it: whole, or its first n - j.
  __device__ __forceinline__ void store_within(T* p, int j, int n) const {
    if (j + width <= n) store(p);
    else store_first(p, n - j);
  }
};

// A held row: thread t of the group owns chunks t, t + kGroup, ... (kPer
// floats in all); chunk i of thread t starts at column first_column(t, i).
// The same columns every row, which the column sums of backward rely on.
template <int kGroup, bool kVec, class T = float>
struct held_row {
  using chunk_type = chunk<kVec, T>;
  static constexpr int width = chunk_type::width;
  static constexpr int chunks = kPer / width;
  __device__ __forceinline__ static int first_column(int t, int i) { return (t + i * kGroup) * width; }
};

// Calls f.template operator()<kGroup, kVec>() for a row of n floats; kGroup 0
// means streamed. vec: n % 4 == 0 and every row pointer 16-byte aligned.
template <class F>
void dispatch_row(int n, bool vec, F&& f) {
  auto with = [&]<int kGroup>() {
    if (vec) f.template operator()<kGroup, true>();
    else f.template operator()<kGroup, false>();
  };
  switch (group_for(n)) {
    case 32: with.template operator()<32>(); break;
    case 64: with.template operator()<64>(); break;
    case 128: with.template operator()<128>(); break;
    case 256: with.template operator()<256>(); break;
    case 512: with.template operator()<512>(); break;
    case 1024: with.template operator()<1024>(); break;
    default: with.template operator()<0>(); break;
  }
}

// Blocks for `rows` rows, rows_per_block<kGroup> each.
template <int kGroup>
unsigned row_blocks(int rows) {
  constexpr int per = rows_per_block<kGroup>;
  return static_cast<unsigned>((rows + per - 1) / per);
}

}  // namespace typeflow::row_math::gpu

#endif  // __CUDACC__

// Precision policies as types: where variables live, what layers compute in,
// and what a layer hands on (Keras's mixed_precision.Policy).
//
//   policy<Param, Compute, Output>   e.g. policy<float32, bfloat16, float32>
//   float32_policy                   everything float32
//   mixed_float16                    float32 variables, float16 compute, loss scaling
//   mixed_bfloat16                   float32 variables, bfloat16 compute, no loss scaling
//
// model<Net, Policy> binds the network under its policy: dense layers
// compute in the compute dtype (or their own, dense<10, float32>), element-
// wise layers keep their input's dtype, and layers that know only float32
// (normalization, attention, embeddings, combinators' children) compute in
// float32. Between layers, a value is stored in the compute dtype when the
// layer after it reads 16 bits, else in float32. Output is kept for the
// type's sake; what a layer hands on follows that rule.
#pragma once

#include <string>
#include <type_traits>

#include "typeflow/core/dtype.hpp"

namespace typeflow {

namespace precision {
template <class Dtype>
inline constexpr bool is_16bit_v = std::is_same_v<Dtype, float16> || std::is_same_v<Dtype, bfloat16>;
}  // namespace precision

template <class Param, class Compute, class Output = Compute>
struct policy {
  static_assert(std::is_same_v<Param, float32>,
                "policy<Param, Compute, Output>: variables (master weights) are float32");
  static_assert(std::is_same_v<Compute, float32> || std::is_same_v<Compute, float16> ||
                    std::is_same_v<Compute, bfloat16>,
                "policy<Param, Compute, Output>: layers compute in float32, float16 or bfloat16");
  using param_type = Param;
  using compute_type = Compute;
  using output_type = Output;
  // float16's range is narrow enough that small gradients underflow: its
  // policies scale the loss (Keras does the same); bfloat16 keeps float32's range.
  static constexpr bool loss_scaling = std::is_same_v<Compute, float16>;
};

using float32_policy = policy<float32, float32, float32>;
using mixed_float16 = policy<float32, float16, float16>;
using mixed_bfloat16 = policy<float32, bfloat16, bfloat16>;

template <class T>
inline constexpr bool is_policy_v = false;

// "mixed_bfloat16", "float32", or "policy<float32, bfloat16, float32>".
template <class P>
std::string policy_name() {
  if constexpr (std::is_same_v<P, float32_policy>) return "float32";
  else if constexpr (std::is_same_v<P, mixed_float16>) return "mixed_float16";
  else if constexpr (std::is_same_v<P, mixed_bfloat16>) return "mixed_bfloat16";
  else
    return "policy<" + std::string(P::param_type::name) + ", " + std::string(P::compute_type::name) + ", " +
           std::string(P::output_type::name) + ">";
}
template <class P, class C, class O>
inline constexpr bool is_policy_v<policy<P, C, O>> = true;

namespace detail {
// model<Net, float32> means the float32 policy.
template <class Policy>
struct policy_of {
  using type = Policy;
};
template <>
struct policy_of<float32> {
  using type = float32_policy;
};
}  // namespace detail

}  // namespace typeflow

// The element-wise activations on the CPU: the shared functor over the
// cores, forward (unless a dense took it over as its epilogue) and backward
// in place on the gradient. 16-bit storage is read in blocks converted to
// float32.
#pragma once

#include <cstddef>
#include <type_traits>

#include "typeflow/core/parallel.hpp"
#include "typeflow/layers/activations.hpp"
#include "typeflow/contract/executor.hpp"
#include "typeflow/precision/storage.hpp"

namespace typeflow {

// Matched by the spec's functor, as the CUDA backend does (nvcc does not
// deduce activation's fixed_string parameter in a partial specialization).
template <class Spec, class Layer, int Batch>
  requires requires { typename Spec::functor; }
class executor<Spec, Layer, Batch, cpu> : public executor_defaults {
  using Functor = typename Spec::functor;
  using output_dtype = typename Layer::output_dtype;
  static constexpr std::ptrdiff_t count = static_cast<std::ptrdiff_t>(Batch * Layer::input_shape::size);
  using value = typename output_dtype::value_type;  // float, f16 or bf16
  static_assert(!Layer::fused || Functor::derivative_from_output,
                "a CPU activation is fused only when its derivative comes from its output (gelu_tanh: GPU only)");

 public:
  explicit executor(const layer_io<cpu>& io) : io_(io) {}

  void forward() {
    if constexpr (Layer::fused) {
      return;
    } else if constexpr (std::is_same_v<value, float>) {
      const float* in = io_.in;
      float* out = io_.out;
      typeflow::parallel_for(count, [=](std::ptrdiff_t i) { out[i] = Functor{}.value(in[i]); });
    } else {  // 16-bit storage: blocks converted to float32 and back
      value* out = reinterpret_cast<value*>(io_.out);
      precision::for_each_block_as_float<output_dtype>(
          reinterpret_cast<const value*>(io_.in), count, [=](float* x, std::size_t begin, std::size_t length) {
#pragma omp simd
            for (std::size_t j = 0; j < length; ++j) x[j] = Functor{}.value(x[j]);
            convert(x, out + begin, length);
          });
    }
  }

  // d_in = d_out * f'(.), in place (d_in and d_out are the same buffer).
  void backward() {
    if (!io_.d_in) return;
    float* grad = io_.d_in;
    const float* from = Functor::derivative_from_output ? io_.out : io_.in;
    if constexpr (std::is_same_v<value, float>) {
      typeflow::parallel_for(count, [=](std::ptrdiff_t i) { grad[i] *= derivative(from[i]); });
    } else {
      precision::for_each_block_as_float<output_dtype>(
          reinterpret_cast<const value*>(from), count, [=](const float* x, std::size_t begin, std::size_t length) {
            float* g = grad + begin;
#pragma omp simd
            for (std::size_t j = 0; j < length; ++j) g[j] *= derivative(x[j]);
          });
    }
  }

 private:
  static float derivative(float from) { return functors::derivative<Functor>(from); }

  layer_io<cpu> io_;
};

}  // namespace typeflow

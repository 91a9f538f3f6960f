// Element-wise math, written once for both backends.
//
// Each activation is a functor with value(x) and a derivative expressed the
// cheapest way it can be: from the output y when that is possible (relu,
// tanh, sigmoid), which lets the forward pass keep only y and lets oneDNN fuse
// the activation into the preceding matmul; from the input x otherwise (gelu).
#pragma once

#include <cmath>

#include "typeflow/core/fast_math.hpp"
#include "typeflow/core/host_device.hpp"

namespace typeflow::functors {

struct relu {
  static constexpr bool derivative_from_output = true;
  TYPEFLOW_HOST_DEVICE float value(float x) const { return x > 0.f ? x : 0.f; }
  TYPEFLOW_HOST_DEVICE float derivative_at_output(float y) const { return y > 0.f ? 1.f : 0.f; }
};

struct tanh_fn {
  static constexpr bool derivative_from_output = true;
  TYPEFLOW_HOST_DEVICE float value(float x) const { return fast_tanh(x); }
  TYPEFLOW_HOST_DEVICE float derivative_at_output(float y) const { return 1.f - y * y; }
};

struct sigmoid {
  static constexpr bool derivative_from_output = true;
  TYPEFLOW_HOST_DEVICE float value(float x) const {
    // Split by sign so that exp never overflows.
    if (x >= 0.f) return 1.f / (1.f + std::exp(-x));
    const float e = std::exp(x);
    return e / (1.f + e);
  }
  TYPEFLOW_HOST_DEVICE float derivative_at_output(float y) const { return y * (1.f - y); }
};

// gelu(x) = x * Phi(x), with Phi the standard normal CDF (exact form; erf
// and exp from core/fast_math.hpp, which vectorise).
struct gelu_exact {
  static constexpr bool derivative_from_output = false;
  TYPEFLOW_HOST_DEVICE float value(float x) const {
    return 0.5f * x * (1.f + fast_erf(x * 0.70710678118654752f));
  }
  // Phi(x) + x·phi(x), with phi(x) = e^(-x²/2) / sqrt(2 pi): erf's own
  // exponential of (x / sqrt 2)².
  TYPEFLOW_HOST_DEVICE float derivative_at_input(float x) const {
    float gaussian;
    const float cdf = 0.5f * (1.f + fast_erf(x * 0.70710678118654752f, gaussian));
    return cdf + x * (0.39894228040143268f * gaussian);
  }
};

// gelu's tanh approximation (Hendrycks & Gimpel), the one GPT-2 uses:
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct gelu_tanh {
  static constexpr bool derivative_from_output = false;
  static constexpr float k = 0.79788456080286536f;  // sqrt(2 / pi)
  TYPEFLOW_HOST_DEVICE float value(float x) const {
    return 0.5f * x * (1.f + fast_tanh(k * (x + 0.044715f * x * x * x)));
  }
  TYPEFLOW_HOST_DEVICE float derivative_at_input(float x) const {
    const float inner = k * (x + 0.044715f * x * x * x);
    const float t = fast_tanh(inner);
    const float d_inner = k * (1.f + 3.f * 0.044715f * x * x);
    return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * d_inner;
  }
};

// f'(.) from the output or from the input, as the functor defines it: what
// an activation's backward multiplies the gradient by on either device (a
// GPU dense that fuses gelu_tanh too, from the product it kept).
template <class Functor>
TYPEFLOW_HOST_DEVICE float derivative(float from) {
  if constexpr (Functor::derivative_from_output)
    return Functor{}.derivative_at_output(from);
  else
    return Functor{}.derivative_at_input(from);
}

}  // namespace typeflow::functors

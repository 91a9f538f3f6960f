// Weight regularizers, Keras's definitions: a penalty added to the loss
// (and reported apart from it as "regularization_loss"), whose gradient is
// added to the parameter's gradient before the optimizer runs.
//   l1<A>:        A * sum(|w|)          gradient A * sign(w)
//   l2<B>:        B * sum(w^2)          gradient 2 B w
//   l1_l2<A, B>:  both
#pragma once

#include <cmath>
#include <cstddef>

#include "typeflow/core/host_device.hpp"

namespace typeflow::regularizers {

// One weight's share, the same on both devices (the GPU's kernel:
// backend/cuda/regularization.hpp): the penalty's gradient, and the penalty
// in double.
TYPEFLOW_HOST_DEVICE float penalty_gradient(float w, float l1, float l2) {
  return l1 * static_cast<float>((w > 0.f) - (w < 0.f)) + 2.f * l2 * w;
}
TYPEFLOW_HOST_DEVICE double penalty_at(float w, float l1, float l2) {
  return double{l1} * static_cast<double>(w < 0.f ? -w : w) + double{l2} * w * w;
}

struct none {
  static constexpr bool active = false;
  static double apply(const float*, float*, std::size_t) { return 0; }
  static double penalty(const float*, std::size_t) { return 0; }
};

template <float L1, float L2>
struct l1_l2 {
  static_assert(L1 >= 0.f && L2 >= 0.f, "regularizers: the l1 and l2 factors must not be negative");
  static constexpr bool active = L1 > 0.f || L2 > 0.f;
  static constexpr float l1_factor = L1, l2_factor = L2;
  // Adds the penalty's gradient to grad and returns the penalty.
  static double apply(const float* w, float* grad, std::size_t n) {
    double penalty = 0;
#pragma omp parallel for simd reduction(+ : penalty) if (n >= 1 << 16)
    for (std::size_t i = 0; i < n; ++i) {
      penalty += penalty_at(w[i], L1, L2);
      grad[i] += penalty_gradient(w[i], L1, L2);
    }
    return penalty;
  }
  static double penalty(const float* w, std::size_t n) {
    double sum = 0;
#pragma omp parallel for simd reduction(+ : sum) if (n >= 1 << 16)
    for (std::size_t i = 0; i < n; ++i) sum += penalty_at(w[i], L1, L2);
    return sum;
  }
};

template <float L1>
using l1 = l1_l2<L1, 0.f>;
template <float L2>
using l2 = l1_l2<0.f, L2>;

}  // namespace typeflow::regularizers

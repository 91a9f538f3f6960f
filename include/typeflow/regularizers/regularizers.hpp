// Weight regularizers, Keras's definitions: a penalty added to the loss
// (and reported apart from it as "regularization_loss"), whose gradient is
// added to the parameter's gradient before the optimizer runs.
//   l1<A>:        A * sum(|w|)          gradient A * sign(w)
//   l2<B>:        B * sum(w^2)          gradient 2 B w
//   l1_l2<A, B>:  both
#pragma once

#include <cmath>
#include <cstddef>

namespace typeflow::regularizers {

struct none {
  static constexpr bool active = false;
  static double apply(const float*, float*, std::size_t) { return 0; }
  static double penalty(const float*, std::size_t) { return 0; }
};

template <float L1, float L2>
struct l1_l2 {
  static_assert(L1 >= 0.f && L2 >= 0.f, "regularizers: the l1 and l2 factors must not be negative");
  static constexpr bool active = L1 > 0.f || L2 > 0.f;
  // Adds the penalty's gradient to grad and returns the penalty.
  static double apply(const float* w, float* grad, std::size_t n) {
    double penalty = 0;
#pragma omp parallel for simd reduction(+ : penalty) if (n >= 1 << 16)
    for (std::size_t i = 0; i < n; ++i) {
      const float x = w[i];
      penalty += double{L1} * std::fabs(x) + double{L2} * x * x;
      grad[i] += L1 * static_cast<float>((x > 0.f) - (x < 0.f)) + 2.f * L2 * x;
    }
    return penalty;
  }
  static double penalty(const float* w, std::size_t n) {
    double sum = 0;
#pragma omp parallel for simd reduction(+ : sum) if (n >= 1 << 16)
    for (std::size_t i = 0; i < n; ++i) sum += double{L1} * std::fabs(w[i]) + double{L2} * w[i] * w[i];
    return sum;
  }
};

template <float L1>
using l1 = l1_l2<L1, 0.f>;
template <float L2>
using l2 = l1_l2<0.f, L2>;

}  // namespace typeflow::regularizers

// softmax: probabilities over the last axis, computed stably (max subtracted).
//
//   input (B, ..., n) -> output (B, ..., n), no parameters.
//
// Backward, in place on the gradient: d_in = y * (d_out - sum(d_out * y)).
// For training, sparse_categorical_crossentropy{.from_logits = true} on the
// logits is the faster and more accurate choice; softmax is here for models
// that output probabilities.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>

#include "typeflow/backend/cpu/parallel.hpp"
#include "typeflow/model/layer.hpp"

namespace typeflow {

// One row of softmax, shared by the layer and the losses.
inline void softmax_row(const float* in, float* out, int n) {
  float max = in[0];
  for (int j = 1; j < n; ++j) max = in[j] > max ? in[j] : max;
  float sum = 0.f;
  for (int j = 0; j < n; ++j) {
    out[j] = std::exp(in[j] - max);
    sum += out[j];
  }
  const float inverse = 1.f / sum;
  for (int j = 0; j < n; ++j) out[j] *= inverse;
}

struct softmax {
  static std::string type_name() { return "softmax"; }

  template <class In, class Context>
  struct bind : layer_defaults {
    static_assert(layer_check<layer_at<Context::position, softmax>, given<In>, (In::rank >= 1)>::passed,
                  "softmax: the input needs at least one axis; softmax normalises the last one");
    using input_shape = In;
    using output_shape = In;
    static constexpr int classes = In::template dim<-1>;
    static constexpr std::size_t rows_per_sample = In::size / classes;
    static constexpr bool gradient_in_place = true;
    static constexpr std::size_t flops_per_sample = 3 * In::size;

    template <int Batch>
    class executor : public executor_defaults {
      static constexpr std::ptrdiff_t rows = static_cast<std::ptrdiff_t>(Batch * rows_per_sample);

     public:
      explicit executor(const layer_io& io) : io_(io) {}

      void forward() {
        const float* in = io_.in;
        float* out = io_.out;
        backend::cpu::parallel_rows(rows, classes, [=](std::ptrdiff_t r) {
          softmax_row(in + r * classes, out + r * classes, classes);
        });
      }

      void backward() {
        if (!io_.d_in) return;
        const float* y = io_.out;
        float* grad = io_.d_in;
        backend::cpu::parallel_rows(rows, classes, [=](std::ptrdiff_t r) {
          const float* yr = y + r * classes;
          float* gr = grad + r * classes;
          float dot = 0.f;
          for (int j = 0; j < classes; ++j) dot += gr[j] * yr[j];
          for (int j = 0; j < classes; ++j) gr[j] = yr[j] * (gr[j] - dot);
        });
      }

     private:
      layer_io io_;
    };
  };
};

}  // namespace typeflow

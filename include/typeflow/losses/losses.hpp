// Losses, with Keras's definitions and its default reduction: the mean over
// the batch of each sample's loss ("sum_over_batch_size").
//
// A loss sees the model's output as rows of `classes` values: (rows, classes)
// with rows = valid samples x positions per sample. It writes each row's loss
// and d(mean loss)/d(output) in one pass. Rows past `valid_rows` are padding:
// they get zero loss and zero gradient.
//
// Labels come in two forms, and each loss says which it takes:
//   sparse: one int32 class id per row, shape = output shape without its last axis
//   dense:  one float per output value, shape = output shape
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "typeflow/backend/cpu/parallel.hpp"
#include "typeflow/core/fast_math.hpp"

namespace typeflow::losses {

enum class label_form { sparse, dense };

namespace detail {
// log(sum(exp(z))) over one row, stably, in vector lanes (fast_exp; the
// sums in lanes: a GPT-2 head's rows are 50257 wide).
inline float log_sum_exp(const float* z, int n) {
  float max = z[0];
#pragma omp simd reduction(max : max)
  for (int j = 1; j < n; ++j) max = z[j] > max ? z[j] : max;
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) sum += fast_exp(z[j] - max);
  return max + std::log(sum);
}
// Keras clips probabilities into [epsilon, 1 - epsilon] before the log.
inline constexpr float probability_epsilon = 1e-7f;
}  // namespace detail

// -log softmax(z)[y] from logits, or -log(p[y] / sum(p)) from probabilities.
struct sparse_categorical_crossentropy {
  bool from_logits = false;

  static constexpr std::string_view name = "sparse_categorical_crossentropy";
  static constexpr label_form labels = label_form::sparse;
  static constexpr int min_classes = 2;

  void operator()(const float* out, const std::int32_t* ids, std::ptrdiff_t rows, int classes,
                  std::ptrdiff_t valid_rows, float* d_out, float* row_loss) const {
    const float scale = valid_rows > 0 ? 1.f / static_cast<float>(valid_rows) : 0.f;
    const bool logits = from_logits;
    backend::cpu::parallel_rows(rows, classes, [=](std::ptrdiff_t r) {
      const float* z = out + r * classes;
      float* g = d_out + r * classes;
      if (r >= valid_rows) {
        std::fill(g, g + classes, 0.f);
        row_loss[r] = 0.f;
        return;
      }
      const int y = ids[r];
      if (logits) {
        const float lse = detail::log_sum_exp(z, classes);
#pragma omp simd
        for (int j = 0; j < classes; ++j) g[j] = fast_exp(z[j] - lse) * scale;
        g[y] -= scale;
        row_loss[r] = lse - z[y];
      } else {
        float sum = 0.f;
        for (int j = 0; j < classes; ++j) sum += z[j];
        const float q = z[y] / sum;
        const float clipped = std::clamp(q, detail::probability_epsilon, 1.f - detail::probability_epsilon);
        row_loss[r] = -std::log(clipped);
        // d/dp_j of -log(p_y / S) is 1/S - [j == y] / p_y; zero where the clip holds.
        const bool inside = q == clipped;
        for (int j = 0; j < classes; ++j) g[j] = inside ? scale / sum : 0.f;
        if (inside) g[y] -= scale / z[y];
      }
    });
  }
};

// -sum(t * log softmax(z)) for dense (e.g. one-hot) targets t.
struct categorical_crossentropy {
  bool from_logits = false;

  static constexpr std::string_view name = "categorical_crossentropy";
  static constexpr label_form labels = label_form::dense;
  static constexpr int min_classes = 2;

  void operator()(const float* out, const float* targets, std::ptrdiff_t rows, int classes,
                  std::ptrdiff_t valid_rows, float* d_out, float* row_loss) const {
    const float scale = valid_rows > 0 ? 1.f / static_cast<float>(valid_rows) : 0.f;
    const bool logits = from_logits;
    backend::cpu::parallel_rows(rows, classes, [=](std::ptrdiff_t r) {
      const float* z = out + r * classes;
      const float* t = targets + r * classes;
      float* g = d_out + r * classes;
      if (r >= valid_rows) {
        std::fill(g, g + classes, 0.f);
        row_loss[r] = 0.f;
        return;
      }
      float target_sum = 0.f;
      for (int j = 0; j < classes; ++j) target_sum += t[j];
      if (logits) {
        const float lse = detail::log_sum_exp(z, classes);
        float loss = 0.f;
        for (int j = 0; j < classes; ++j) {
          loss += t[j] * (lse - z[j]);
          g[j] = (fast_exp(z[j] - lse) * target_sum - t[j]) * scale;
        }
        row_loss[r] = loss;
      } else {
        float sum = 0.f;
        for (int j = 0; j < classes; ++j) sum += z[j];
        // L = -sum_j t_j log(clip(p_j / S)); where p_j / S is inside the clip,
        // dL/dp_k = -t_k / p_k + (1 / S) sum_j t_j, else that term is zero.
        float loss = 0.f, shared = 0.f;
        for (int j = 0; j < classes; ++j) {
          const float q = z[j] / sum;
          const float clipped = std::clamp(q, detail::probability_epsilon, 1.f - detail::probability_epsilon);
          loss -= t[j] * std::log(clipped);
          if (q == clipped) shared += t[j];
        }
        for (int j = 0; j < classes; ++j) {
          const float q = z[j] / sum;
          const float clipped = std::clamp(q, detail::probability_epsilon, 1.f - detail::probability_epsilon);
          const float own = q == clipped ? -t[j] / z[j] : 0.f;
          g[j] = (own + shared / sum) * scale;
        }
        row_loss[r] = loss;
      }
    });
  }
};

// mean((y - t)^2) over each row's values.
struct mean_squared_error {
  static constexpr std::string_view name = "mean_squared_error";
  static constexpr label_form labels = label_form::dense;
  static constexpr int min_classes = 1;

  void operator()(const float* out, const float* targets, std::ptrdiff_t rows, int width,
                  std::ptrdiff_t valid_rows, float* d_out, float* row_loss) const {
    const float scale = valid_rows > 0 ? 2.f / (static_cast<float>(valid_rows) * width) : 0.f;
    backend::cpu::parallel_rows(rows, width, [=](std::ptrdiff_t r) {
      const float* y = out + r * width;
      const float* t = targets + r * width;
      float* g = d_out + r * width;
      if (r >= valid_rows) {
        std::fill(g, g + width, 0.f);
        row_loss[r] = 0.f;
        return;
      }
      float sum = 0.f;
      for (int j = 0; j < width; ++j) {
        const float e = y[j] - t[j];
        sum += e * e;
        g[j] = e * scale;
      }
      row_loss[r] = sum / static_cast<float>(width);
    });
  }
};

template <class L>
concept loss = requires {
  { L::name } -> std::convertible_to<std::string_view>;
  { L::labels } -> std::convertible_to<label_form>;
  { L::min_classes } -> std::convertible_to<int>;
};

}  // namespace typeflow::losses

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
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "typeflow/core/parallel.hpp"
#include "typeflow/core/fast_math.hpp"
#include "typeflow/core/host_device.hpp"

namespace typeflow::losses {

enum class label_form { sparse, dense };

namespace detail {
// log(sum(exp(z))) over one row, stably, in vector lanes (fast_exp; the
// sums in lanes: a GPT-2 head's rows are 50257 wide).
TYPEFLOW_HOST_DEVICE float log_sum_exp(const float* z, int n) {
  float max = z[0];
#if !defined(__CUDA_ARCH__)
#pragma omp simd reduction(max : max)
#endif
  for (int j = 1; j < n; ++j) max = z[j] > max ? z[j] : max;
  float sum = 0.f;
#if !defined(__CUDA_ARCH__)
#pragma omp simd reduction(+ : sum)
#endif
  for (int j = 0; j < n; ++j) sum += fast_exp(z[j] - max);
  return max + std::log(sum);
}
// Keras clips probabilities into [epsilon, 1 - epsilon] before the log.
inline constexpr float probability_epsilon = 1e-7f;
TYPEFLOW_HOST_DEVICE float clip_probability(float q) {
  constexpr float low = probability_epsilon, high = 1.f - probability_epsilon;
  return q < low ? low : (q > high ? high : q);
}
}  // namespace detail

// A row loss over (rows, width) outputs and targets on the CPU's cores: the
// rows past valid_rows are padding (zero loss, zero gradient).
template <class Loss>
void apply_rows(const Loss& loss, const float* out, const float* targets, std::ptrdiff_t rows, int width,
                std::ptrdiff_t valid_rows, float* d_out, float* row_loss) {
  const float scale = Loss::gradient_scale(valid_rows, width);
  typeflow::parallel_rows(rows, width, [=, &loss](std::ptrdiff_t r) {
    float* g = d_out + r * width;
    if (r >= valid_rows) {
      std::fill(g, g + width, 0.f);
      row_loss[r] = 0.f;
      return;
    }
    row_loss[r] = loss.row(out + r * width, targets + r * width, width, scale, g);
  });
}

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
    typeflow::parallel_rows(rows, classes, [=](std::ptrdiff_t r) {
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
        const float clipped = detail::clip_probability(q);
        row_loss[r] = -std::log(clipped);
        // d/dp_j of -log(p_y / S) is 1/S - [j == y] / p_y; zero where the clip holds.
        const bool inside = q == clipped;
        for (int j = 0; j < classes; ++j) g[j] = inside ? scale / sum : 0.f;
        if (inside) g[y] -= scale / z[y];
      }
    });
  }
};

// Dense-target losses give their arithmetic as one row's work, `row`, which
// both devices run: the CPU over its cores (apply_rows below), the GPU as a
// thread per row (backend/cuda/losses.hpp), so the CPU tests check the very
// code the GPU executes. A row gets its outputs y and targets t (width
// values each), writes d(mean loss)/dy into g and returns its loss;
// gradient_scale(valid_rows, width) is the mean's factor that g carries.

// -sum(t * log softmax(z)) for dense (e.g. one-hot) targets t.
struct categorical_crossentropy {
  bool from_logits = false;
  // Keras's label_smoothing: each target t becomes t (1 - s) + s / classes.
  float label_smoothing = 0.f;

  static constexpr std::string_view name = "categorical_crossentropy";
  static constexpr label_form labels = label_form::dense;
  static constexpr int min_classes = 2;

  TYPEFLOW_HOST_DEVICE static float gradient_scale(std::ptrdiff_t valid_rows, int) {
    return valid_rows > 0 ? 1.f / static_cast<float>(valid_rows) : 0.f;
  }

  TYPEFLOW_HOST_DEVICE float target(const float* t, int j, int classes) const {
    return label_smoothing == 0.f ? t[j] : t[j] * (1.f - label_smoothing) + label_smoothing / static_cast<float>(classes);
  }

  TYPEFLOW_HOST_DEVICE float row(const float* z, const float* t, int classes, float scale, float* g) const {
    float target_sum = 0.f;
    for (int j = 0; j < classes; ++j) target_sum += target(t, j, classes);
    if (from_logits) {
      const float lse = detail::log_sum_exp(z, classes);
      float loss = 0.f;
      for (int j = 0; j < classes; ++j) {
        const float tj = target(t, j, classes);
        loss += tj * (lse - z[j]);
        g[j] = (fast_exp(z[j] - lse) * target_sum - tj) * scale;
      }
      return loss;
    }
    float sum = 0.f;
    for (int j = 0; j < classes; ++j) sum += z[j];
    // L = -sum_j t_j log(clip(p_j / S)); where p_j / S is inside the clip,
    // dL/dp_k = -t_k / p_k + (1 / S) sum_j t_j, else that term is zero.
    float loss = 0.f, shared = 0.f;
    for (int j = 0; j < classes; ++j) {
      const float q = z[j] / sum;
      const float clipped = detail::clip_probability(q);
      loss -= target(t, j, classes) * std::log(clipped);
      if (q == clipped) shared += target(t, j, classes);
    }
    for (int j = 0; j < classes; ++j) {
      const float q = z[j] / sum;
      const float own = q == detail::clip_probability(q) ? -target(t, j, classes) / z[j] : 0.f;
      g[j] = (own + shared / sum) * scale;
    }
    return loss;
  }

  void operator()(const float* out, const float* targets, std::ptrdiff_t rows, int classes,
                  std::ptrdiff_t valid_rows, float* d_out, float* row_loss) const {
    apply_rows(*this, out, targets, rows, classes, valid_rows, d_out, row_loss);
  }
};

// mean((y - t)^2) over each row's values.
struct mean_squared_error {
  static constexpr std::string_view name = "mean_squared_error";
  static constexpr label_form labels = label_form::dense;
  static constexpr int min_classes = 1;

  TYPEFLOW_HOST_DEVICE static float gradient_scale(std::ptrdiff_t valid_rows, int width) {
    return valid_rows > 0 ? 2.f / (static_cast<float>(valid_rows) * static_cast<float>(width)) : 0.f;
  }

  TYPEFLOW_HOST_DEVICE float row(const float* y, const float* t, int width, float scale, float* g) const {
    float sum = 0.f;
    for (int j = 0; j < width; ++j) {
      const float e = y[j] - t[j];
      sum += e * e;
      g[j] = e * scale;
    }
    return sum / static_cast<float>(width);
  }

  void operator()(const float* out, const float* targets, std::ptrdiff_t rows, int width,
                  std::ptrdiff_t valid_rows, float* d_out, float* row_loss) const {
    apply_rows(*this, out, targets, rows, width, valid_rows, d_out, row_loss);
  }
};

// The element-wise losses below take the mean over each row's values, as
// Keras's reduce over the last axis, then the batch mean: the gradient
// carries 1 / (valid_rows x width).
namespace detail {
TYPEFLOW_HOST_DEVICE float element_mean_scale(std::ptrdiff_t valid_rows, int width) {
  return valid_rows > 0 ? 1.f / (static_cast<float>(valid_rows) * static_cast<float>(width)) : 0.f;
}
TYPEFLOW_HOST_DEVICE float sign(float x) { return x > 0.f ? 1.f : (x < 0.f ? -1.f : 0.f); }
}  // namespace detail

// mean(|y - t|) over each row's values; the gradient at y = t is 0, as
// TensorFlow's sign.
struct mean_absolute_error {
  static constexpr std::string_view name = "mean_absolute_error";
  static constexpr label_form labels = label_form::dense;
  static constexpr int min_classes = 1;

  TYPEFLOW_HOST_DEVICE static float gradient_scale(std::ptrdiff_t valid_rows, int width) {
    return detail::element_mean_scale(valid_rows, width);
  }

  TYPEFLOW_HOST_DEVICE float row(const float* y, const float* t, int width, float scale, float* g) const {
    float sum = 0.f;
    for (int j = 0; j < width; ++j) {
      const float e = y[j] - t[j];
      sum += std::fabs(e);
      g[j] = detail::sign(e) * scale;
    }
    return sum / static_cast<float>(width);
  }

  void operator()(const float* out, const float* targets, std::ptrdiff_t rows, int width,
                  std::ptrdiff_t valid_rows, float* d_out, float* row_loss) const {
    apply_rows(*this, out, targets, rows, width, valid_rows, d_out, row_loss);
  }
};

// Keras's Huber: e^2 / 2 where |e| <= delta, else delta (|e| - delta / 2),
// e = y - t, the mean over each row's values.
struct huber {
  float delta = 1.f;

  static constexpr std::string_view name = "huber";
  static constexpr label_form labels = label_form::dense;
  static constexpr int min_classes = 1;

  TYPEFLOW_HOST_DEVICE static float gradient_scale(std::ptrdiff_t valid_rows, int width) {
    return detail::element_mean_scale(valid_rows, width);
  }

  TYPEFLOW_HOST_DEVICE float row(const float* y, const float* t, int width, float scale, float* g) const {
    float sum = 0.f;
    for (int j = 0; j < width; ++j) {
      const float e = y[j] - t[j], a = std::fabs(e);
      const bool quadratic = a <= delta;
      sum += quadratic ? 0.5f * e * e : delta * a - 0.5f * delta * delta;
      g[j] = (quadratic ? e : delta * detail::sign(e)) * scale;
    }
    return sum / static_cast<float>(width);
  }

  void operator()(const float* out, const float* targets, std::ptrdiff_t rows, int width,
                  std::ptrdiff_t valid_rows, float* d_out, float* row_loss) const {
    apply_rows(*this, out, targets, rows, width, valid_rows, d_out, row_loss);
  }
};

// Keras's binary_crossentropy, each output an independent probability (or,
// from_logits, its logit), the mean over each row's values; label_smoothing s
// makes each target t (1 - s) + s / 2. From logits:
// max(z, 0) - z t + log(1 + exp(-|z|)), gradient sigmoid(z) - t; from
// probabilities p clipped into [1e-7, 1 - 1e-7]: -(t log p + (1 - t) log(1 - p)),
// no gradient where the clip holds p.
struct binary_crossentropy {
  bool from_logits = false;
  float label_smoothing = 0.f;

  static constexpr std::string_view name = "binary_crossentropy";
  static constexpr label_form labels = label_form::dense;
  static constexpr int min_classes = 1;

  TYPEFLOW_HOST_DEVICE static float gradient_scale(std::ptrdiff_t valid_rows, int width) {
    return detail::element_mean_scale(valid_rows, width);
  }

  TYPEFLOW_HOST_DEVICE float row(const float* y, const float* t, int width, float scale, float* g) const {
    float sum = 0.f;
    for (int j = 0; j < width; ++j) {
      const float target = t[j] * (1.f - label_smoothing) + 0.5f * label_smoothing;
      if (from_logits) {
        const float z = y[j];
        const float e = fast_exp(-std::fabs(z));  // in (0, 1]
        sum += (z > 0.f ? z : 0.f) - z * target + std::log(1.f + e);
        const float sigmoid = z >= 0.f ? 1.f / (1.f + e) : e / (1.f + e);
        g[j] = (sigmoid - target) * scale;
      } else {
        const float p = detail::clip_probability(y[j]);
        sum -= target * std::log(p) + (1.f - target) * std::log(1.f - p);
        g[j] = p == y[j] ? (-target / p + (1.f - target) / (1.f - p)) * scale : 0.f;
      }
    }
    return sum / static_cast<float>(width);
  }

  void operator()(const float* out, const float* targets, std::ptrdiff_t rows, int width,
                  std::ptrdiff_t valid_rows, float* d_out, float* row_loss) const {
    apply_rows(*this, out, targets, rows, width, valid_rows, d_out, row_loss);
  }
};

// Keras's kl_divergence: sum(t log(t / y)) over each row, t and y clipped
// into [1e-7, 1] first (no gradient where the clip holds y).
struct kl_divergence {
  static constexpr std::string_view name = "kl_divergence";
  static constexpr label_form labels = label_form::dense;
  static constexpr int min_classes = 1;

  TYPEFLOW_HOST_DEVICE static float gradient_scale(std::ptrdiff_t valid_rows, int) {
    return valid_rows > 0 ? 1.f / static_cast<float>(valid_rows) : 0.f;
  }

  TYPEFLOW_HOST_DEVICE float row(const float* y, const float* t, int width, float scale, float* g) const {
    constexpr float low = detail::probability_epsilon;
    float sum = 0.f;
    for (int j = 0; j < width; ++j) {
      const float tc = t[j] < low ? low : (t[j] > 1.f ? 1.f : t[j]);
      const float yc = y[j] < low ? low : (y[j] > 1.f ? 1.f : y[j]);
      sum += tc * std::log(tc / yc);
      g[j] = yc == y[j] ? -tc / yc * scale : 0.f;
    }
    return sum;
  }

  void operator()(const float* out, const float* targets, std::ptrdiff_t rows, int width,
                  std::ptrdiff_t valid_rows, float* d_out, float* row_loss) const {
    apply_rows(*this, out, targets, rows, width, valid_rows, d_out, row_loss);
  }
};

// Keras's cosine_similarity loss: -sum(l2_normalize(t) l2_normalize(y)) over
// each row, in [-1, 1] (-1: the same direction); l2_normalize(x) is
// x / sqrt(max(sum(x^2), 1e-12)), as TensorFlow's.
struct cosine_similarity {
  static constexpr std::string_view name = "cosine_similarity";
  static constexpr label_form labels = label_form::dense;
  static constexpr int min_classes = 1;

  TYPEFLOW_HOST_DEVICE static float gradient_scale(std::ptrdiff_t valid_rows, int) {
    return valid_rows > 0 ? 1.f / static_cast<float>(valid_rows) : 0.f;
  }

  TYPEFLOW_HOST_DEVICE float row(const float* y, const float* t, int width, float scale, float* g) const {
    constexpr float floor = 1e-12f;
    float yy = 0.f, tt = 0.f, ty = 0.f;
    for (int j = 0; j < width; ++j) {
      yy += y[j] * y[j];
      tt += t[j] * t[j];
      ty += t[j] * y[j];
    }
    const float y_norm = std::sqrt(yy > floor ? yy : floor), t_norm = std::sqrt(tt > floor ? tt : floor);
    const float cosine = ty / (y_norm * t_norm);
    // d(-cos)/dy = -(t / |t| - cos y / |y|) / |y| (only the first term where
    // |y|^2 is under the floor, which is then a constant).
    const bool clamped = !(yy > floor);
    for (int j = 0; j < width; ++j) {
      const float along = clamped ? 0.f : cosine * y[j] / y_norm;
      g[j] = -(t[j] / t_norm - along) / y_norm * scale;
    }
    return -cosine;
  }

  void operator()(const float* out, const float* targets, std::ptrdiff_t rows, int width,
                  std::ptrdiff_t valid_rows, float* d_out, float* row_loss) const {
    apply_rows(*this, out, targets, rows, width, valid_rows, d_out, row_loss);
  }
};

template <class L>
concept loss = requires {
  { L::name } -> std::convertible_to<std::string_view>;
  { L::labels } -> std::convertible_to<label_form>;
  { L::min_classes } -> std::convertible_to<int>;
};

}  // namespace typeflow::losses

// Seeded weight initializers with Keras's definitions.
//
// fill<Shape>(data, random_stream) writes Shape::size values; element i draws
// from counter i of the stream, so the result depends only on (seed,
// parameter), never on thread count or order. A layer names its defaults
// (dense: glorot_uniform kernel, zeros bias) and takes overrides as options,
// e.g. dense<64, kernel_initializer<initializers::he_normal>>.
#pragma once

#include <cmath>
#include <cstddef>

#include "typeflow/core/random.hpp"
#include "typeflow/core/shape.hpp"

namespace typeflow::initializers {

// Keras's fans: for rank >= 2, the last axis is fan-out, the one before it
// fan-in, and any leading axes are a receptive field multiplying both.
template <class Shape>
struct fans {
  static constexpr double receptive_field = [] {
    double product = 1;
    for (int i = 0; i + 2 < Shape::rank; ++i) product *= Shape::dims[static_cast<std::size_t>(i)];
    return product;
  }();
  static constexpr double in = Shape::rank >= 2 ? Shape::template dim<-2> * receptive_field
                               : Shape::rank == 1 ? Shape::template dim<0>
                                                  : 1.0;
  static constexpr double out = Shape::rank >= 2 ? Shape::template dim<-1> * receptive_field
                                : Shape::rank == 1 ? Shape::template dim<0>
                                                   : 1.0;
};

template <float Value>
struct constant {
  static constexpr const char* name = "constant";
  template <class Shape>
  static void fill(float* data, random_stream) {
    for (std::size_t i = 0; i < Shape::size; ++i) data[i] = Value;
  }
};
using zeros = constant<0.f>;
using ones = constant<1.f>;

namespace detail {
// A standard normal draw for element i, redrawn (from further counters)
// until it lies within two standard deviations, as Keras's truncated normal.
inline float truncated_standard_normal(random_stream rng, std::size_t i, std::size_t count) {
  float z = rng.normal(i);
  for (std::size_t attempt = 1; std::fabs(z) > 2.f; ++attempt) z = rng.normal(i + attempt * count);
  return z;
}
// The stddev of a standard normal truncated to [-2, 2].
inline constexpr double truncated_stddev = 0.87962566103423978;
}  // namespace detail

// Normal(Mean, Stddev) truncated at two standard deviations.
template <float Stddev = 0.05f, float Mean = 0.f>
struct truncated_normal {
  static_assert(Stddev > 0.f, "truncated_normal<Stddev>: Stddev must be positive");
  static constexpr const char* name = "truncated_normal";
  template <class Shape>
  static void fill(float* data, random_stream rng) {
    for (std::size_t i = 0; i < Shape::size; ++i)
      data[i] = Mean + Stddev * detail::truncated_standard_normal(rng, i, Shape::size);
  }
};

// Normal(Mean, Stddev), untruncated (Keras's RandomNormal; GPT-2 initialises
// its embeddings and kernels with random_normal<0.02f>).
template <float Stddev = 0.05f, float Mean = 0.f>
struct random_normal {
  static_assert(Stddev > 0.f, "random_normal<Stddev>: Stddev must be positive");
  static constexpr const char* name = "random_normal";
  template <class Shape>
  static void fill(float* data, random_stream rng) {
    for (std::size_t i = 0; i < Shape::size; ++i) data[i] = Mean + Stddev * rng.normal(i);
  }
};

// Uniform in [Min, Max) (Keras's RandomUniform, the default of its Embedding).
template <float Min = -0.05f, float Max = 0.05f>
struct random_uniform {
  static_assert(Min < Max, "random_uniform<Min, Max>: Min must be below Max");
  static constexpr const char* name = "random_uniform";
  template <class Shape>
  static void fill(float* data, random_stream rng) {
    for (std::size_t i = 0; i < Shape::size; ++i) data[i] = Min + (Max - Min) * rng.uniform(i);
  }
};

enum class fan_mode { fan_in, fan_out, fan_avg };
enum class distribution { truncated_normal, uniform };

// Keras's VarianceScaling: variance Scale / n with n the chosen fan, drawn
// uniformly in +-sqrt(3 * Scale / n) or from a normal truncated at two
// standard deviations and rescaled so that the variance holds.
template <double Scale, fan_mode Mode, distribution Distribution>
struct variance_scaling {
  static constexpr const char* name = "variance_scaling";
  template <class Shape>
  static constexpr double fan = Mode == fan_mode::fan_in    ? fans<Shape>::in
                                : Mode == fan_mode::fan_out ? fans<Shape>::out
                                                            : (fans<Shape>::in + fans<Shape>::out) / 2;
  template <class Shape>
  static void fill(float* data, random_stream rng) {
    const double variance = Scale / fan<Shape>;
    if constexpr (Distribution == distribution::uniform) {
      const float limit = static_cast<float>(std::sqrt(3.0 * variance));
      for (std::size_t i = 0; i < Shape::size; ++i) data[i] = (2.f * rng.uniform(i) - 1.f) * limit;
    } else {
      const float stddev = static_cast<float>(std::sqrt(variance) / detail::truncated_stddev);
      for (std::size_t i = 0; i < Shape::size; ++i)
        data[i] = stddev * detail::truncated_standard_normal(rng, i, Shape::size);
    }
  }
};

using glorot_uniform = variance_scaling<1.0, fan_mode::fan_avg, distribution::uniform>;
using glorot_normal = variance_scaling<1.0, fan_mode::fan_avg, distribution::truncated_normal>;
using he_uniform = variance_scaling<2.0, fan_mode::fan_in, distribution::uniform>;
using he_normal = variance_scaling<2.0, fan_mode::fan_in, distribution::truncated_normal>;
using lecun_uniform = variance_scaling<1.0, fan_mode::fan_in, distribution::uniform>;
using lecun_normal = variance_scaling<1.0, fan_mode::fan_in, distribution::truncated_normal>;

}  // namespace typeflow::initializers

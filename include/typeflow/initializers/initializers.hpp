// Seeded weight initializers with Keras's definitions.
//
// fill(data, random_stream) writes Shape::size values; element i draws from
// counter i of the stream, so the result depends only on (seed, parameter),
// never on thread count or order.
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

struct zeros {
  static constexpr const char* name = "zeros";
  template <class Shape>
  static void fill(float* data, random_stream) {
    for (std::size_t i = 0; i < Shape::size; ++i) data[i] = 0.f;
  }
};

struct ones {
  static constexpr const char* name = "ones";
  template <class Shape>
  static void fill(float* data, random_stream) {
    for (std::size_t i = 0; i < Shape::size; ++i) data[i] = 1.f;
  }
};

// U(-limit, limit), limit = sqrt(6 / (fan_in + fan_out)).
struct glorot_uniform {
  static constexpr const char* name = "glorot_uniform";
  template <class Shape>
  static void fill(float* data, random_stream rng) {
    const float limit = static_cast<float>(std::sqrt(6.0 / (fans<Shape>::in + fans<Shape>::out)));
    for (std::size_t i = 0; i < Shape::size; ++i) data[i] = (2.f * rng.uniform(i) - 1.f) * limit;
  }
};

// A normal with stddev sqrt(2 / fan_in), truncated at two standard deviations
// (redrawn outside them) and rescaled as Keras does so the stddev holds.
struct he_normal {
  static constexpr const char* name = "he_normal";
  template <class Shape>
  static void fill(float* data, random_stream rng) {
    const float stddev = static_cast<float>(std::sqrt(2.0 / fans<Shape>::in) / 0.87962566103423978);
    for (std::size_t i = 0; i < Shape::size; ++i) {
      float z = rng.normal(i);
      for (std::size_t attempt = 1; std::fabs(z) > 2.f; ++attempt) z = rng.normal(i + attempt * Shape::size);
      data[i] = z * stddev;
    }
  }
};

}  // namespace typeflow::initializers

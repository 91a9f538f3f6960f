// A learnable toy problem for tests of what fit reports (callbacks,
// reports): class c lights up feature c of 8, plus noise; toy_net learns it
// in a few epochs.
#pragma once

#include <cstdint>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace typeflow::testing {

struct toy_data {
  std::vector<float> features;       // (samples, 8)
  std::vector<std::int32_t> labels;  // (samples), classes 0..3
  explicit toy_data(int samples) {
    for (int i = 0; i < samples; ++i) {
      const int c = (i * 7) % 4;
      for (int j = 0; j < 8; ++j)
        features.push_back((j == c ? 1.f : 0.f) + 0.3f * (2.f * random_stream{5, 0}.uniform(i * 8 + j) - 1.f));
      labels.push_back(c);
    }
  }
};

using toy_net = sequential<input<8>, dense<16>, relu, dense<4>>;

}  // namespace typeflow::testing

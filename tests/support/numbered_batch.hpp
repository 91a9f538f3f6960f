// numbered_batch<N, F, C>(index): a full batch of N samples, F features in
// [-1, 1) and class ids in [0, C), different for each index and the same
// every time: what the tests' train_on_batch loops feed to models that must
// take the same steps.
#pragma once

#include <cstdint>

#include <typeflow/typeflow.hpp>

namespace typeflow::testing {

template <int N, int F, int C>
data::batch_of<N, data::tensor_value<float, shape<F>>, data::tensor_value<std::int32_t, shape<>>> numbered_batch(
    int index) {
  data::batch_of<N, data::tensor_value<float, shape<F>>, data::tensor_value<std::int32_t, shape<>>> b;
  const random_stream rng{91, static_cast<std::uint64_t>(index)};
  for (std::size_t i = 0; i < b.features.size(); ++i) b.features[i] = 2.f * rng.uniform(i) - 1.f;
  for (int i = 0; i < N; ++i) b.labels[i] = (i * 5 + index) % C;
  b.valid = N;
  return b;
}

}  // namespace typeflow::testing

// A finite-difference check of every parameter's gradient, shared by the
// layer tests (gradient_test.cpp) and the sequence-model tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include <doctest/doctest.h>

#include <typeflow/typeflow.hpp>

namespace typeflow::testing {

template <int Batch, class Features, class Label>
using test_batch = data::batch_of<Batch, Features, Label>;

// Checks d(loss)/d(parameter) for every parameter of the model against
// (L(w + h) - L(w - h)) / 2h, in float32: h = 1e-2, a relative error of
// at most 2e-2 plus an absolute slack for tiny gradients.
template <class Net, class Loss, int Batch, class Features, class Label>
void check_gradients(Loss loss, const test_batch<Batch, Features, Label>& batch) {
  model<Net> net{7};
  net.compile(optimizers::sgd{.learning_rate = 0.f}, loss);
  net.train_on_batch(batch);
  auto dataset = data::from_tensor_slices<typename Features::shape_type, typename Label::shape_type>(
                  batch.features, batch.labels) |
              data::batch<Batch>;
  int checked = 0;
  for (const auto& spec : net.parameter_specs()) {
    auto weights = net.parameter(spec.name);
    const std::vector<float> analytic(net.gradient(spec.name).begin(), net.gradient(spec.name).end());
    for (std::size_t i = 0; i < weights.size(); i += 1 + weights.size() / 24) {
      const float original = weights[i];
      const float h = 1e-2f;
      weights[i] = original + h;
      const double up = net.evaluate(dataset).at("loss");
      weights[i] = original - h;
      const double down = net.evaluate(dataset).at("loss");
      weights[i] = original;
      const double numeric = (up - down) / (2.0 * h);
      INFO(spec.name << "[" << i << "]: analytic " << analytic[i] << ", numeric " << numeric);
      CHECK(std::fabs(analytic[i] - numeric) <= 2e-2 * std::fabs(numeric) + 2e-4);
      ++checked;
    }
  }
  CHECK(checked > 0);
}

}  // namespace typeflow::testing

// A finite-difference check of every parameter's gradient, shared by the
// layer tests (gradient_test.cpp) and the sequence-model tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <typeflow/typeflow.hpp>

namespace typeflow::testing {

template <int Batch, class Features, class Label>
using test_batch = data::batch_of<Batch, Features, Label>;

// Checks d(loss)/d(w) of the parameters whose names `select` accepts, as the
// last training step left it, against (L(w + h) - L(w - h)) / 2h of
// evaluate()'s loss over `dataset`, in float32: h = 1e-2, a relative error
// of at most 2e-2 plus `slack` for tiny gradients. Returns the values checked.
template <class Model, class Dataset, class Select>
int check_gradients_of(Model& net, const Dataset& dataset, Select select, double slack = 2e-4) {
  int checked = 0;
  for (const auto& spec : net.parameter_specs()) {
    if (!select(spec.name)) continue;
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
      CHECK(std::fabs(analytic[i] - numeric) <= 2e-2 * std::fabs(numeric) + slack);
      ++checked;
    }
  }
  return checked;
}

// Every parameter's gradient after one step on `batch`.
template <class Net, class Loss, int Batch, class Features, class Label>
void check_gradients(Loss loss, const test_batch<Batch, Features, Label>& batch) {
  model<Net> net{7};
  net.compile(optimizers::sgd{.learning_rate = 0.f}, loss);
  net.train_on_batch(batch);
  auto dataset = data::from_tensor_slices<typename Features::shape_type, typename Label::shape_type>(
                  batch.features, batch.labels) |
              data::batch<Batch>;
  CHECK(check_gradients_of(net, dataset, [](const std::string&) { return true; }) > 0);
}

}  // namespace typeflow::testing

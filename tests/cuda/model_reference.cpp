// The CPU half of the CUDA model test (see model_reference.hpp).
#include "model_reference.hpp"

#include <cmath>
#include <type_traits>

namespace cuda_reference {

toy_data make_data() {
  toy_data d;
  const tf::random_stream rng{seed, 99};
  for (int i = 0; i < samples; ++i) {
    float score = 0;
    for (int j = 0; j < 32; ++j) {
      const float x = rng.normal(static_cast<std::uint64_t>(i * 32 + j));
      d.features.push_back(x);
      score += (j % 3 == 0 ? x : -0.5f * x);
    }
    d.labels.push_back(static_cast<std::int32_t>(std::fabs(score * 2.f)) % 10);
  }
  return d;
}

namespace {
template <class Net>
auto data_for() {
  const toy_data d = make_data();
  if constexpr (std::is_same_v<Net, two_input_net>)
    return tf::data::from_values(halves_of(d)) | tf::data::batch<batch>;
  else
    return tf::data::from_tensor_slices<tf::shape<32>>(d.features, d.labels) | tf::data::batch<batch>;
}

template <class Net>
run_result train(int epochs) {
  auto data = data_for<Net>();
  tf::model<Net> model(seed);
  model.compile(tf::optimizers::adam{.learning_rate = 0.01f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::sparse_categorical_accuracy{});
  run_result r;
  const auto history = model.fit(data, {.epochs = epochs, .verbose = 0});
  r.losses = history["loss"];
  r.accuracies = history["sparse_categorical_accuracy"];
  const auto region = model.parameter_region();
  r.parameters.assign(region.begin(), region.end());
  return r;
}
}  // namespace

run_result train_weighted_on_cpu(int epochs, bool by_sample) {
  const toy_data d = make_data();
  tf::model<mlp> model(seed);
  model.compile(tf::optimizers::adam{.learning_rate = 0.01f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::sparse_categorical_accuracy{});
  const auto history = by_sample ? model.fit(weighted_dataset(d, true), {.epochs = epochs, .verbose = 0})
                                 : model.fit(unweighted_dataset(d), {.epochs = epochs, .verbose = 0,
                                                                     .class_weight = weighted_classes()});
  run_result r{history["loss"], history["sparse_categorical_accuracy"], {}};
  const auto region = model.parameter_region();
  r.parameters.assign(region.begin(), region.end());
  return r;
}

run_result train_on_cpu(int epochs) { return train<mlp>(epochs); }
run_result train_graph_on_cpu(int epochs) { return train<graph_net>(epochs); }
run_result train_two_inputs_on_cpu(int epochs) { return train<two_input_net>(epochs); }

}  // namespace cuda_reference

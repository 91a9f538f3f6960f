// The CPU half of the CUDA mixed-precision test (see mixed_reference.hpp).
#include "mixed_reference.hpp"

namespace cuda_mixed_reference {

namespace {

template <class Policy>
run_result train_on_cpu(int epochs) {
  const toy_data d = make_data();
  auto data = tf::data::from_tensor_slices<tf::shape<32>>(d.features, d.labels) | tf::data::batch<batch>;
  tf::model<mlp, Policy> model(seed);
  model.compile(tf::optimizers::adam{.learning_rate = 0.01f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::sparse_categorical_accuracy{});
  run_result r;
  const auto history = model.fit(data, {.epochs = epochs, .verbose = 0});
  r.losses = history["loss"];
  r.accuracies = history["sparse_categorical_accuracy"];
  const auto region = model.parameter_region();
  r.parameters.assign(region.begin(), region.end());
  r.iterations = model.iterations();
  r.skipped_steps = model.skipped_steps();
  r.loss_scale = model.loss_scale();
  return r;
}

}  // namespace

run_result train_bfloat16_on_cpu(int epochs) { return train_on_cpu<tf::mixed_bfloat16>(epochs); }
run_result train_float16_on_cpu(int epochs) { return train_on_cpu<tf::mixed_float16>(epochs); }
run_result train_float32_on_cpu(int epochs) { return train_on_cpu<tf::float32_policy>(epochs); }

overflow_batch make_overflow_batch() {
  overflow_batch b;
  b.features = {1.f, 1.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  b.labels = {1};
  b.valid = 1;
  return b;
}

overflow_trace overflow_on_cpu(int steps) {
  tf::model<overflow_net, tf::mixed_float16> model{1};
  model.compile(tf::optimizers::sgd{.learning_rate = 0.1f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  set_overflow_weights(model);
  overflow_trace t;
  const auto before = model.parameter_region();
  t.parameters_before.assign(before.begin(), before.end());
  const overflow_batch b = make_overflow_batch();
  for (int i = 0; i < steps; ++i) {
    model.train_on_batch(b);
    t.skipped_steps.push_back(model.skipped_steps());
    t.iterations.push_back(model.iterations());
    t.loss_scales.push_back(model.loss_scale());
  }
  const auto after = model.parameter_region();
  t.parameters_after.assign(after.begin(), after.end());
  return t;
}

}  // namespace cuda_mixed_reference

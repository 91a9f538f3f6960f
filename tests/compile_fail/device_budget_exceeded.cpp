// expected-error: the memory plan for this batch size exceeds the budget: budget_check gives each part's bytes per device
// expected-error: budget_check<typeflow::parameter_bytes<
// expected-error: typeflow::activation_bytes<
// expected-error: 1048576, false>
//
// 256 samples of 4096 features through dense<4096> layers need far more than
// 1 MiB of activations: the error names each part, the plan's bytes and the budget.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;
using namespace tf::literals;

using wide = tf::sequential<tf::input<4096>, tf::dense<4096>, tf::relu, tf::dense<10>>;

int main() {
  tf::model<wide, tf::float32, tf::single_device, tf::cpu, tf::device_budget<1_MiB>> model;
  model.compile(tf::optimizers::sgd{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  tf::data::batch_of<256, tf::data::tensor_value<float, tf::shape<4096>>, tf::data::tensor_value<std::int32_t, tf::shape<>>>
      batch;
  model.train_on_batch(batch);
}

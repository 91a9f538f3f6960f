// expected-error: only sparse_categorical_crossentropy{.from_logits = true} exists so far
#include <typeflow/cuda.hpp>

namespace tf = typeflow;

using mlp = tf::sequential<tf::input<8>, tf::dense<16>, tf::relu, tf::dense<4>>;

int main() {
  tf::model<mlp, tf::float32, tf::single_device, tf::cuda> model;
  model.compile(tf::optimizers::sgd{}, tf::losses::mean_squared_error{});
}

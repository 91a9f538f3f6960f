// expected-error: cannot train or predict in a CUDA translation unit
#include <typeflow/cuda.hpp>

namespace tf = typeflow;

using mlp = tf::sequential<tf::input<8>, tf::dense<16>, tf::relu, tf::dense<4>>;

int main() {
  // nvcc cannot compile oneDNN's C++ header: CPU models train in .cpp files.
  tf::model<mlp> model;
  model.compile(tf::optimizers::sgd{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  tf::data::batch_of<4, tf::data::tensor_value<float, tf::shape<8>>, tf::data::tensor_value<std::int32_t, tf::shape<>>> batch;
  model.train_on_batch(batch);
}

// expected-error: mirrored<N>: the global batch must split into N equal shards
#include <typeflow/cuda.hpp>

namespace tf = typeflow;

using mlp = tf::sequential<tf::input<8>, tf::dense<16>, tf::relu, tf::dense<4>>;

int main() {
  tf::model<mlp, tf::float32, tf::mirrored<3>, tf::cuda> model;
  model.compile(tf::optimizers::sgd{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  tf::data::batch_of<16, tf::data::tensor_value<float, tf::shape<8>>, tf::data::tensor_value<std::int32_t, tf::shape<>>> batch;
  model.train_on_batch(batch);  // 16 samples do not split over 3 GPUs
}

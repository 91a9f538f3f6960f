// expected-error: mirrored<N>: the global batch must split into N equal shards
//
// A batch of 100 does not split over 3 replicas; the note under the error
// names the strategy and the batch.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<4>, tf::dense<2>>;

int main() {
  tf::model<net, tf::float32, tf::mirrored<3>> model;
  model.compile(tf::optimizers::sgd{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  tf::data::batch_of<100, tf::data::tensor_value<float, tf::shape<4>>, tf::data::tensor_value<std::int32_t, tf::shape<>>> batch;
  model.train_on_batch(batch);
}

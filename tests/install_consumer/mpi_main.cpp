// Compiled against an installed typeflow through typeflow::mpi: its
// TYPEFLOW_MULTI_WORKER=1 makes <typeflow/typeflow.hpp> include multi_worker
// (and <mpi.h>, whose include path typeflow::mpi brings too). Run as one
// process without mpirun (a single worker), it trains one step.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<4>, tf::dense<8>, tf::relu, tf::dense<2>>;

int main() {
  tf::data::batch_of<4, tf::data::tensor_value<float, tf::shape<4>>, tf::data::tensor_value<std::int32_t, tf::shape<>>>
      batch;
  for (std::size_t i = 0; i < batch.features.size(); ++i) batch.features[i] = static_cast<float>(i % 3);
  for (int i = 0; i < 4; ++i) batch.labels[i] = i % 2;
  batch.valid = 4;
  tf::model<net, tf::float32, tf::multi_worker> model{1};
  model.compile(tf::optimizers::sgd{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const double loss = model.train_on_batch(batch);
  return tf::distribute::worker_count() == 1 && loss > 0 && loss < 10 ? 0 : 1;
}

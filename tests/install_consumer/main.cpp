// Compiled against an installed typeflow: the headers, the include path, the
// C++20 requirement and the dependencies (oneDNN, OpenMP, Hana, JSON) all come
// from find_package(typeflow) and typeflow::typeflow. It trains a tiny model
// for one step, so linking and running are checked too.
// The install.plain_command test compiles this same file with a bare
// g++ -std=c++20 -fopenmp -I include ... -ldnnl, without MPI: it lives here,
// not in tests/standalone/ (whose files become doctest binaries), because it
// is a user's program, built the two ways a user would build it.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<4>, tf::dense<8>, tf::relu, tf::dense<2>>;
static_assert(net::parameter_count == 4 * 8 + 8 + 8 * 2 + 2);

int main() {
  tf::data::batch_of<4, tf::data::tensor_value<float, tf::shape<4>>, tf::data::tensor_value<std::int32_t, tf::shape<>>>
      batch;
  for (std::size_t i = 0; i < batch.features.size(); ++i) batch.features[i] = static_cast<float>(i % 3);
  for (int i = 0; i < 4; ++i) batch.labels[i] = i % 2;
  batch.valid = 4;
  tf::model<net> model{1};
  model.compile(tf::optimizers::sgd{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const double loss = model.train_on_batch(batch);
  return loss > 0 && loss < 10 ? 0 : 1;
}

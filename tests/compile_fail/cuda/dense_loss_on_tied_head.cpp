// expected-error: compile on tf::cuda: a tied_logits head stores its rows padded to a multiple of 64 columns
//
// Bound for a GPU, a tied_logits that ends the network stores its logits'
// rows padded (20 -> 64 columns here) and its loss writes d_logits over
// them (layers/embedding.hpp): only sparse_categorical_crossentropy, which
// reads class ids, is given such a head; a dense-target loss is refused.
#include <typeflow/cuda.hpp>

namespace tf = typeflow;

using language_model = tf::sequential<tf::typed_input<tf::int32, 16>, tf::embedding<20, 32>,
                                      tf::positional_embedding<16>, tf::layer_norm, tf::tied_logits>;

int main() {
  tf::model<language_model, tf::float32, tf::single_device, tf::cuda> model;
  model.compile(tf::optimizers::sgd{}, tf::losses::mean_squared_error{});
}

// expected-error: this layer has no executor on this device
#include <typeflow/cuda.hpp>

namespace tf = typeflow;

// conv2d runs on oneDNN only: the error names the layer and the device.
using cnn = tf::sequential<tf::input<8, 8, 1>, tf::conv2d<4, 3>, tf::flatten, tf::dense<10>>;

int main() {
  tf::model<cnn, tf::float32, tf::single_device, tf::cuda> model;
  model.compile(tf::optimizers::adam{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  tf::data::batch_of<4, tf::data::tensor_value<float, tf::shape<8, 8, 1>>, tf::data::tensor_value<std::int32_t, tf::shape<>>> batch;
  model.train_on_batch(batch);
}

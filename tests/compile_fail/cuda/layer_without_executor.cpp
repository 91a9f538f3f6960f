// expected-error: this layer has no executor on this device
#include <typeflow/cuda.hpp>

namespace tf = typeflow;

// A layer of the program's own, with no executor for tf::cuda (every layer
// of the library has one): the error names the layer and the device.
struct doubled {
  static std::string type_name() { return "doubled"; }
  template <class In, class Context>
  struct bind : tf::layer_defaults {
    using input_shape = In;
    using output_shape = In;
  };
};

using net = tf::sequential<tf::input<8>, tf::dense<16>, doubled, tf::dense<10>>;

int main() {
  tf::model<net, tf::float32, tf::single_device, tf::cuda> model;
  model.compile(tf::optimizers::adam{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  tf::data::batch_of<4, tf::data::tensor_value<float, tf::shape<8>>, tf::data::tensor_value<std::int32_t, tf::shape<>>> batch;
  model.train_on_batch(batch);
}

// expected-error: compile on tf::cuda: this loss has no executor on the GPU
//
// A loss per output (on_output) has no executor on tf::cuda yet; every plain
// loss has one (backend/cuda/losses.hpp).
#include <typeflow/cuda.hpp>

namespace tf = typeflow;

using net = tf::functional<tf::node<"features", tf::input<16>>,              //
                           tf::node<"hidden", tf::dense<8>, "features">,      //
                           tf::node<"priority", tf::dense<1>, "hidden">,      //
                           tf::node<"department", tf::dense<4>, "hidden">,    //
                           tf::outputs<"priority", "department">>;

int main() {
  tf::model<net, tf::float32, tf::single_device, tf::cuda> model;
  model.compile(tf::optimizers::sgd{}, tf::on_output<"priority">(tf::losses::mean_squared_error{}),
                tf::on_output<"department">(tf::losses::sparse_categorical_crossentropy{.from_logits = true}));
}

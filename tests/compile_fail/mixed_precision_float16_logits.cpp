// Under mixed_float16 the output layer computes in float16 unless told
// otherwise: the loss would receive 16-bit logits.
// expected-error: the loss would receive 16-bit outputs
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

int main() {
  using net = tf::sequential<tf::input<8>, tf::dense<16>, tf::relu, tf::dense<4>>;
  tf::model<net, tf::mixed_float16> model;  // fix: tf::dense<4, tf::float32>
  return static_cast<int>(model.iterations());
}

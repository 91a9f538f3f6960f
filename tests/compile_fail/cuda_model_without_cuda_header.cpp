// expected-error: is defined in typeflow/cuda.hpp
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using mlp = tf::sequential<tf::input<8>, tf::dense<16>, tf::relu, tf::dense<4>>;

int main() {
  tf::model<mlp, tf::float32, tf::single_device, tf::cuda> model;  // typeflow/cuda.hpp not included
  (void)model;
}

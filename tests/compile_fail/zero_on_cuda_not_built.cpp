// expected-error: zero<Stage, Strategy> on tf::cuda is not built yet
//
// The check is the model's, so it speaks before the CUDA engine is needed.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<4>, tf::dense<2>>;

int main() {
  tf::model<net, tf::float32, tf::zero<2, tf::mirrored<2>>, tf::cuda> model;
  (void)model;
}

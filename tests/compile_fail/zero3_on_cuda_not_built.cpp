// expected-error: zero<3, Strategy> on tf::cuda is not built yet
//
// zero<1|2> run on GPUs; stage 3's per-layer gathers do not. The check is
// the model's, so it speaks before the CUDA engine is needed.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<4>, tf::dense<2>>;

int main() {
  tf::model<net, tf::float32, tf::zero<3, tf::mirrored<2>>, tf::cuda> model;
  (void)model;
}

// expected-error: zero<Stage, Strategy>: Stage is 1 (optimizer slots sharded), 2 (and gradients) or 3 (and parameters)
//
// ZeRO has three stages; a fourth shards nothing more.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<4>, tf::dense<2>>;

int main() {
  tf::model<net, tf::float32, tf::zero<4, tf::mirrored<2>>> model;
  (void)model;
}

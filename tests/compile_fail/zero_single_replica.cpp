// expected-error: zero<Stage, Strategy>: one replica has nothing to share its state with
//
// zero<k, single_device> is a type, but a shard of one is the whole.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<4>, tf::dense<2>>;

int main() {
  tf::model<net, tf::float32, tf::zero<1, tf::single_device>> model;
  (void)model;
}

// expected-error: zero<3, Strategy>: stage 3 (parameters sharded, gathered before each layer) is not built yet
//
// zero<3, ...> is a type (a checkpoint can name it), but nothing runs it yet.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<4>, tf::dense<2>>;

int main() {
  static_assert(tf::strategy<tf::zero<3, tf::mirrored<2>>>);
  tf::model<net, tf::float32, tf::zero<3, tf::mirrored<2>>> model;
  (void)model;
}

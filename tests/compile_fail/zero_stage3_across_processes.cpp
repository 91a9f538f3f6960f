// expected-error: zero<3, Strategy> across processes: stage 3 (parameters sharded, gathered before each layer) runs within one process only
//
// zero<3, multi_worker> is a type (a checkpoint can name it), but stage 3
// gathers with threads in one process; multi_worker needs MPI's headers, so
// a strategy of the test's own that crosses processes stands in for it.
#include <typeflow/typeflow.hpp>

#include "../support/two_processes_strategy.hpp"

namespace tf = typeflow;

using net = tf::sequential<tf::input<4>, tf::dense<2>>;

int main() {
  static_assert(tf::strategy<tf::zero<3, two_processes>>);
  tf::model<net, tf::float32, tf::zero<3, two_processes>> model;
  (void)model;
}

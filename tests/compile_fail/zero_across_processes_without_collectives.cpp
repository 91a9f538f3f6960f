// expected-error: zero<Stage, Strategy> across processes: Strategy must give the shards' collectives
//
// A strategy across processes that offers only the strategy concept's
// collectives (broadcast, all-reduce) cannot shard: zero<k> needs a
// reduce-scatter and an all-gather, as multi_worker gives.
#include <typeflow/typeflow.hpp>

#include "../support/two_processes_strategy.hpp"

namespace tf = typeflow;

using net = tf::sequential<tf::input<4>, tf::dense<2>>;

int main() {
  tf::model<net, tf::float32, tf::zero<1, two_processes>> model;
  (void)model;
}

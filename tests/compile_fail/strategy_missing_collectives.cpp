// expected-error: Strategy is single_device, mirrored<N> or multi_worker, or a type with their facts and collectives
//
// A strategy of one's own that states its replica count only: an engine
// would have to guess whether it crosses processes and how to all-reduce.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<4>, tf::dense<2>>;

struct two_threads {
  static constexpr int replicas = 2;
};

int main() {
  tf::model<net, tf::float32, two_threads> model;
  (void)model;
}

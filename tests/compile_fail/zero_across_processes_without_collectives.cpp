// expected-error: zero<Stage, Strategy> across processes: Strategy must give the shards' collectives
//
// A strategy across processes that offers only the strategy concept's
// collectives (broadcast, all-reduce) cannot shard: zero<k> needs a
// reduce-scatter and an all-gather, as multi_worker gives.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<4>, tf::dense<2>>;

struct two_processes {
  static constexpr int replicas = 1;
  static constexpr bool across_processes = true;
  static constexpr bool sync_statistics = false;
  static std::string name() { return "two_processes"; }
  int rank() const { return 0; }
  bool is_chief() const { return true; }
  void broadcast(float*, std::size_t) const {}
  void all_reduce_mean(float*, std::size_t) const {}
};

int main() {
  tf::model<net, tf::float32, tf::zero<1, two_processes>> model;
  (void)model;
}

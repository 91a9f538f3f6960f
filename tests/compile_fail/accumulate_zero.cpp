// expected-error: accumulate<K>: K, the number of micro-batches per update, must be at least 1
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

int main() {
  auto optimizer = tf::optimizers::accumulate<0>(tf::optimizers::adam{});
  (void)optimizer;
}

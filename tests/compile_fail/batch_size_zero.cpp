// expected-error: batch<N>: the batch size N must be positive
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

int main() {
  auto data = tf::data::from_tensor_slices<tf::shape<4>>(std::vector<float>(8), std::vector<std::int32_t>(2)) |
              tf::data::batch<0>;
  (void)data;
}

// expected-error: map(f): the function cannot be called
//
// A map function must accept the previous stage's element_type. mnist's
// elements are example<tensor_value<uint8, (28, 28)>, tensor_value<int32, ()>>,
// not int, so this pipeline must not compile, and the first error must be
// map's sentence rather than a wall of template names.
#include <typeflow/data/data.hpp>

namespace data = typeflow::data;

int main() {
  auto pipeline = data::mnist("data/mnist", data::split::train)
                | data::map([](int pixel) { return pixel * 2; });
  (void)pipeline;
}

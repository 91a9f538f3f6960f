// expected-error: max_pooling2d: with valid padding the pool window must fit in the input
//
// After the first pool the sample is (2, 2, 8); a 3 x 3 window under valid
// padding fits nowhere, so the output would be empty.
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/pooling.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<4, 4, 1>, tf::dense<8>, tf::max_pooling2d<2>, tf::max_pooling2d<3>, tf::flatten,
                           tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

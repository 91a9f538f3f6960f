// expected-error: max_pooling2d<Pool, Strides, Padding>: the strides must be positive in both directions
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/pooling.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<28, 28, 1>, tf::dense<8>, tf::max_pooling2d<2, 0>, tf::flatten, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

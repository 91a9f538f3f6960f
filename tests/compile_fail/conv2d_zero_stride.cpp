// expected-error: conv2d<Filters, Kernel, Strides>: the strides must be positive
//
// A window that does not move: strides {2, 0}.
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/conv2d.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<28, 28, 1>, tf::conv2d<8, 3, tf::window{2, 0}>, tf::flatten, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

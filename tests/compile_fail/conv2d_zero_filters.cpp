// expected-error: conv2d<Filters, Kernel>: Filters, the number of output channels, must be positive
//
// conv2d<0, 3> would produce no channels.
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/conv2d.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<28, 28, 1>, tf::conv2d<0, 3>, tf::flatten, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

// expected-error: conv2d<Filters, Kernel>: the kernel's height and width must be positive
//
// A 0 x 3 kernel has no taps.
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/conv2d.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<28, 28, 1>, tf::conv2d<8, tf::window{0, 3}>, tf::flatten, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

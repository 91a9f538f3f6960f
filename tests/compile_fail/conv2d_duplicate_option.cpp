// expected-error: conv2d<Filters, Kernel, Strides, Padding, Options...>: each kind of option may be given once
//
// Two use_bias options contradict each other.
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/conv2d.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<28, 28, 1>, tf::conv2d<8, 3, 1, tf::padding::valid, tf::use_bias<false>, tf::use_bias<true>>, tf::flatten, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

// expected-error: conv2d: dilation<D>: the dilation rate must be positive
//
// Keras's dilation_rate counts from 1 (no gaps); 0 is not a rate.
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/conv2d.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<28, 28, 1>, tf::conv2d<8, 3, 1, tf::padding::valid, tf::dilation<0>>, tf::flatten, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

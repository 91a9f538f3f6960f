// expected-error: depthwise_conv2d: depth_multiplier<M>: M, the output channels per input channel, must be positive
//
// depth_multiplier<0> would produce no channels.
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/conv2d.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<28, 28, 4>, tf::depthwise_conv2d<3, 1, tf::padding::same, tf::depth_multiplier<0>>, tf::flatten, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

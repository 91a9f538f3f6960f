// expected-error: depthwise_conv2d: the input must be (height, width, channels) per sample, channels last
//
// A (28, 28) image needs its channel axis: reshape<28, 28, 1> first.
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/conv2d.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<28, 28>, tf::depthwise_conv2d<3>, tf::flatten, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

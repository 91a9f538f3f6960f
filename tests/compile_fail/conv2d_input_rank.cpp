// expected-error: conv2d: the input must be (height, width, channels) per sample, channels last
//
// A flattened image (784,) has no height and width; reshape<28, 28, 1> first.
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/conv2d.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<784>, tf::conv2d<32, 3>, tf::flatten, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

// expected-error: zero_padding2d: the input must be (height, width, channels) per sample, channels last
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/zero_padding2d.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<28, 28>, tf::zero_padding2d<2>, tf::flatten, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

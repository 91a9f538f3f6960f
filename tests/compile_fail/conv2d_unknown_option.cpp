// expected-error: each option must be dilation<>, use_bias<>, kernel_initializer<>, bias_initializer<>
//
// conv2d computes in float32 under every policy; it takes no dtype option.
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/conv2d.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<28, 28, 1>, tf::conv2d<8, 3, 1, tf::padding::valid, tf::float16>, tf::flatten, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

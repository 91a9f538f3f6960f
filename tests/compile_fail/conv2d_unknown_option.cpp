// expected-error: each option must be dilation<>, use_bias<>, kernel_initializer<>, bias_initializer<>
//
// depth_multiplier<> belongs to depthwise_conv2d; conv2d takes no such option.
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/conv2d.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<28, 28, 1>, tf::conv2d<8, 3, 1, tf::padding::valid, tf::depth_multiplier<2>>,
                           tf::flatten, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

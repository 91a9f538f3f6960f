// expected-error: conv2d: the (dilated) kernel is larger than the input, so padding::valid leaves no output
//
// A 3 x 3 kernel dilated by 3 spans 7 x 7, more than the 6 x 6 input; padding::same would keep (6, 6).
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/conv2d.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<6, 6, 2>, tf::conv2d<8, 3, 1, tf::padding::valid, tf::dilation<3>>, tf::flatten, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

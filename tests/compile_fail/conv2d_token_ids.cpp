// expected-error: conv2d: the input holds int32 token ids; convolutions read float features
//
// typed_input<int32, ...> holds token ids, which a convolution would read as floats.
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/conv2d.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::typed_input<tf::int32, 8, 8, 1>, tf::conv2d<8, 3>, tf::flatten, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

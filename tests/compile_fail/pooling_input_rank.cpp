// expected-error: max_pooling2d: the input must be (height, width, channels) per sample, channels last
//
// dense<128> gives 128 features per sample, not an image: pooling needs
// (height, width, channels). reshape<...> first, or pool before flattening.
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/pooling.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<784>, tf::dense<128>, tf::max_pooling2d<2>, tf::flatten, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

// expected-error: global_average_pooling2d: the input must be (height, width, channels) per sample, channels last
//
// input<28, 28> has no channel axis; Keras's layer wants (height, width, channels).
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/pooling.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<28, 28>, tf::global_average_pooling2d, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

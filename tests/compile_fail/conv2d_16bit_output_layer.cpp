// expected-error: the loss would receive 16-bit outputs
//
// Under a mixed policy a convolution computes in 16 bits; as the last layer
// it needs a float32 dtype option (conv2d<1, 3, 1, padding::same, float32>).
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/conv2d.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<28, 28, 1>, tf::conv2d<8, 3, 1, tf::padding::same>, tf::conv2d<1, 3, 1, tf::padding::same>>;

int main() { return static_cast<int>(sizeof(tf::model<net, tf::mixed_bfloat16>)); }

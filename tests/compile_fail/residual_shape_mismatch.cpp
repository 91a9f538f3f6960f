// expected-error: residual<Layers...>: the block must keep its input's shape, since its output is added to its input
//
// The block widens (16, 32) to (16, 64), so x + f(x) has no meaning. The note
// under the error names the position (2) and both shapes.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<16, 32>, tf::dense<32>, tf::residual<tf::layer_norm, tf::dense<64>>>;

int main() { return static_cast<int>(net::parameter_count); }

// expected-error: zero_padding2d<Pad>: the padding must not be negative
#include <typeflow/typeflow.hpp>
#include <typeflow/layers/zero_padding2d.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<28, 28, 1>, tf::zero_padding2d<{1, -1}>, tf::flatten, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

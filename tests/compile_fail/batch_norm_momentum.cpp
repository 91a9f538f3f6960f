// expected-error: batch_norm: momentum is the moving statistics' weight on their old value and must lie in [0, 1)
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

// PyTorch's momentum=0.1 would be Keras's 0.9; 1.5 is neither.
using net = tf::sequential<tf::input<16>, tf::dense<32>, tf::batch_normalization<tf::batch_norm_options{.momentum = 1.5f}>,
                           tf::relu, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

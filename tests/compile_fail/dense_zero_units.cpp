// expected-error: dense<Units>: Units, the number of output features, must be positive
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<784>, tf::dense<128>, tf::relu, tf::dense<0>>;

int main() { return static_cast<int>(net::parameter_count); }

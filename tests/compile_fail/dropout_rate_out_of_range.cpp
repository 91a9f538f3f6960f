// expected-error: dropout<Rate>: Rate is the fraction of inputs dropped and must lie in [0, 1)
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<784>, tf::dense<128>, tf::relu, tf::dropout<1.5f>, tf::dense<10>>;

int main() { return static_cast<int>(net::parameter_count); }

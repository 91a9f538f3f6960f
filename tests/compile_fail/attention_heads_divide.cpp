// expected-error: causal_self_attention<Heads>: the width D must split evenly into Heads heads (D % Heads != 0)
//
// A width of 100 does not split into 3 heads.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<16, 100>, tf::causal_self_attention<3>>;

int main() { return static_cast<int>(net::parameter_count); }

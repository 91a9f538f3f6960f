// expected-error: graph<Nodes...>: nothing reads this node; every node but the outputs
// expected-error: "side"
//
// "side" is computed and never read: a dead branch, usually a wiring mistake.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::functional<tf::input<16>,                            //
                           tf::node<"side", tf::dense<8>, "input">,  //
                           tf::node<"main", tf::dense<8>, "input">,  //
                           tf::node<"out", tf::dense<4>, "main">>;

int main() { return static_cast<int>(net::parameter_count); }

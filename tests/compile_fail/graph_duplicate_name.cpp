// expected-error: graph<Nodes...>: two nodes have one name
// expected-error: "hidden"
//
// Two nodes are called "hidden". The note names both.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::functional<tf::input<16>,                              //
                           tf::node<"hidden", tf::dense<16>, "input">,  //
                           tf::node<"hidden", tf::dense<16>, "input">,  //
                           tf::node<"out", tf::dense<4>, "hidden">>;

int main() { return static_cast<int>(net::parameter_count); }

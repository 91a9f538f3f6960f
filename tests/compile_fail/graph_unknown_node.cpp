// expected-error: graph<Nodes...>: a node reads a name that is no node of the graph
// expected-error: "sum"
//
// "sum" reads "blok", a typo for "block". The note names the node and what it reads.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::functional<tf::input<16>,                               //
                           tf::node<"block", tf::dense<16>, "input">,   //
                           tf::node<"sum", tf::add, "blok", "input">,   //
                           tf::node<"logits", tf::dense<4>, "sum">>;

int main() { return static_cast<int>(net::parameter_count); }

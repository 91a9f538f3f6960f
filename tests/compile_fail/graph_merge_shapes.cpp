// expected-error: graph<Nodes...>: a merge's inputs do not fit
// expected-error: given<typeflow::shape<8>, typeflow::shape<4> >
//
// add reads (8) and (4). The note names the node and both shapes.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::functional<tf::input<16>,                         //
                           tf::node<"a", tf::dense<8>, "input">,  //
                           tf::node<"b", tf::dense<4>, "input">,  //
                           tf::node<"sum", tf::add, "a", "b">>;

int main() { return static_cast<int>(net::parameter_count); }

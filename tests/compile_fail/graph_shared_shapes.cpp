// expected-error: graph<Nodes...>: shared<"x"> applies node x's layer to an input whose shape gives it other parameters
// expected-error: given<typeflow::shape<8> >
//
// Node "a" is a dense<8> on (16) inputs; "b" applies it to (8) values, which
// would need an (8, 8) kernel.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::functional<tf::input<16>,                          //
                           tf::node<"a", tf::dense<8>, "input">,   //
                           tf::node<"b", tf::shared<"a">, "a">,    //
                           tf::node<"out", tf::dense<4>, "b">>;

int main() { return static_cast<int>(net::parameter_count); }

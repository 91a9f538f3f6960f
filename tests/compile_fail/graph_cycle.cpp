// expected-error: graph<Nodes...>: a node reads itself or a node after it, which would make a cycle
// expected-error: "a"
//
// "a" reads "b", which reads "a": a cycle. The note names "a" and the later node it reads.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::functional<tf::input<16>,                       //
                           tf::node<"a", tf::dense<16>, "b">,   //
                           tf::node<"b", tf::dense<16>, "a">,   //
                           tf::node<"out", tf::add, "a", "input">>;

int main() { return static_cast<int>(net::parameter_count); }

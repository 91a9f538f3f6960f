// expected-error: functional<...>: nothing reads this input; every input must feed a node
// expected-error: "tags"
//
// The input "tags" is declared but no node reads it: the data would be
// loaded and ignored.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::functional<tf::node<"title", tf::input<16>>,             //
                           tf::node<"tags", tf::input<12>>,              //
                           tf::node<"hidden", tf::dense<8>, "title">,    //
                           tf::node<"out", tf::dense<4>, "hidden">>;

int main() { return static_cast<int>(net::parameter_count); }

// expected-error: functional<...>: outputs<...> names a node that does not exist
// expected-error: "departement"
//
// outputs<...> names a node that is not in the graph (a typo).
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::functional<tf::node<"features", tf::input<16>>,              //
                           tf::node<"hidden", tf::dense<8>, "features">,      //
                           tf::node<"priority", tf::dense<1>, "hidden">,      //
                           tf::node<"department", tf::dense<4>, "hidden">,    //
                           tf::outputs<"priority", "departement">>;

int main() { return static_cast<int>(net::parameter_count); }

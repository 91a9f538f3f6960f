// expected-error: frozen<Layers...> freezes whole layers of the network: use it at the network's top level
//
// A frozen block inside repeat<> would leave repeat's parameters partly
// trained; the note under the error names the position (2).
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using block = tf::sequential<tf::dense<16>, tf::relu>;
using net = tf::sequential<tf::input<16>, tf::dense<16>, tf::repeat<2, tf::frozen<block>>, tf::dense<4>>;

int main() { return static_cast<int>(net::parameter_count); }

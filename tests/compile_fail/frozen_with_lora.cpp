// expected-error: frozen<Layers...>: a layer inside it has lora<> adapters, which would stay trained
//
// frozen<> goes anywhere a block does (here inside repeat<>), but a layer
// inside it cannot also carry trained adapters; the note under the error
// names the position (2).
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using block = tf::sequential<tf::dense<16, tf::lora<4>>, tf::relu>;
using net = tf::sequential<tf::input<16>, tf::dense<16>, tf::repeat<2, tf::frozen<block>>, tf::dense<4>>;

int main() { return static_cast<int>(net::parameter_count); }

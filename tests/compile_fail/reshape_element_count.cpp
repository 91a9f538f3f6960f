// expected-error: reshape<Dims...>: the target shape must hold exactly as many elements as the layer's input
//
// dense<10> produces 10 values per sample; reshape<7, 7> wants 49. The note
// under the error names the position (3), the layer and both shapes.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<784>, tf::dense<10>, tf::relu, tf::reshape<7, 7>>;

int main() { return static_cast<int>(net::parameter_count); }

// expected-error: embedding<Vocab, Dim>: the layer must come right after an int32 input of token ids
//
// A float32 input cannot index an embedding table.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<64>, tf::embedding<100, 32>>;

int main() { return static_cast<int>(net::parameter_count); }

// expected-error: tied_logits: the network has no embedding<Vocab, Dim> at its top level to tie the logits to
//
// The network takes float features, so there is no embedding matrix for the
// output projection to reuse.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<16, 32>, tf::dense<32>, tf::tied_logits>;

int main() { return static_cast<int>(net::parameter_count); }

// expected-error: embedding<Vocab, Dim>: the layer must come right after an int32 input of token ids
//
// A block that starts with an embedding reads token ids when it follows an
// int32 input node (model/functional.hpp's header example); after a float32
// input node it is refused with the embedding's own sentence.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::functional<tf::node<"title", tf::input<12>>,
                           tf::node<"title_features", tf::sequential<tf::embedding<1000, 16>, tf::flatten>, "title">,
                           tf::node<"priority", tf::dense<1>, "title_features">>;

int main() { return static_cast<int>(net::parameter_count); }

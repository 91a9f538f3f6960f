// expected-error: compile: this loss needs at least two classes on the output's last axis
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<4>, tf::dense<1>>;

int main() {
  tf::model<net> model;
  model.compile(tf::optimizers::adam{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
}

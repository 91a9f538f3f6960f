// expected-error: fit/evaluate: the dataset's labels can match the model's output in neither form a loss takes
//
// The model outputs 10 logits per sample; the dataset's labels have shape
// (5,): neither class ids (shape ()) nor targets of shape (10,).
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<4>, tf::dense<10>>;

int main() {
  auto data = tf::data::from_tensor_slices<tf::shape<4>, tf::shape<5>>(std::vector<float>(8), std::vector<float>(10)) |
              tf::data::batch<2>;
  tf::model<net> model;
  model.compile(tf::optimizers::sgd{}, tf::losses::mean_squared_error{});
  model.fit(data);
}

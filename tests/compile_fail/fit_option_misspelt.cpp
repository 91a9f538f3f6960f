// expected-error: has no non-static data member named 'validation_splt'
//
// fit's options written apart from the call (tf::fit_options_for): the
// compiler names a misspelt option, which inside fit(ds, {...}) it cannot.
#include <cstdint>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<4>, tf::dense<2>>;

int main() {
  auto train = tf::data::from_tensor_slices<tf::shape<4>>(std::vector<float>(8), std::vector<std::int32_t>(2)) |
               tf::data::batch<2>;
  tf::fit_options_for<decltype(train)> options{.epochs = 2, .validation_splt = 0.2};
  tf::model<net> model{1};
  model.compile(tf::optimizers::sgd{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  return static_cast<int>(model.fit(train, options)["loss"].size());
}

// expected-error: zero<k>: the optimizer must update in shards
//
// An optimizer whose own update() sees the whole region cannot update one
// shard per replica.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::sequential<tf::input<4>, tf::dense<2>>;

struct whole_region_sgd {
  static constexpr std::string_view name = "whole_region_sgd";
  float rate = 0.01f;
  void validate() const {}
  int slot_count() const { return 0; }
  double learning_rate(std::int64_t) const { return rate; }
  void update(const tf::optimizers::update_arguments& a) const {
    for (std::ptrdiff_t i = 0; i < a.floats; ++i) a.weights[i] -= rate * a.grads[i];
  }
};

int main() {
  tf::model<net, tf::float32, tf::zero<1, tf::mirrored<2>>> model;
  model.compile(whole_region_sgd{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
}

// expected-error: fit/evaluate/predict: the dataset's features must be a record of the network's inputs, in its order
//
// The dataset's record gives "ids" before "image"; the network packs its
// inputs in the order its input nodes are declared.
#include <cstdint>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;
namespace data = typeflow::data;

using net = tf::functional<tf::node<"image", tf::input<8>>,                       //
                           tf::node<"ids", tf::typed_input<tf::int32, 2>>,         //
                           tf::node<"emb", tf::embedding<10, 4>, "ids">,           //
                           tf::node<"flat", tf::flatten, "emb">,                   //
                           tf::node<"both", tf::concatenate<>, "image", "flat">,   //
                           tf::node<"out", tf::dense<4>, "both">>;

using features = data::record<data::part<"ids", data::tensor_value<std::int32_t, tf::shape<2>>>,
                              data::part<"image", data::tensor_value<float, tf::shape<8>>>>;
using label = data::tensor_value<std::int32_t, tf::shape<>>;

int main() {
  tf::model<net> m{1};
  std::vector<data::example<features, label>> samples(8);
  return static_cast<int>(m.predict(data::from_values(samples) | data::batch<8>).size());
}

// expected-error: compile: on_output<"name"> names an output the network does not have
// expected-error: "prio"
//
// The outputs are "priority" and "department"; a loss for "prio" (a typo)
// would train nothing, so compile() refuses it where it is written.
#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

using net = tf::functional<tf::node<"features", tf::input<16>>,              //
                           tf::node<"hidden", tf::dense<8>, "features">,      //
                           tf::node<"priority", tf::dense<1>, "hidden">,      //
                           tf::node<"department", tf::dense<4>, "hidden">,    //
                           tf::outputs<"priority", "department">>;

int main() {
  tf::model<net> m{1};
  m.compile(tf::optimizers::adam{}, tf::on_output<"prio">(tf::losses::mean_squared_error{}),
            tf::on_output<"department">(tf::losses::sparse_categorical_crossentropy{.from_logits = true}));
}

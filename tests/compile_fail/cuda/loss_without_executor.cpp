// expected-error: compile on tf::cuda: an output's loss has no executor on the GPU
//
// A loss of one's own has no executor on tf::cuda (backend/cuda/losses.hpp
// lists the losses that have one), given plainly or, as here, to one output
// of several (train/cuda_output_losses.hpp runs the listed ones per output).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <typeflow/cuda.hpp>

namespace tf = typeflow;

using net = tf::functional<tf::node<"features", tf::input<16>>,              //
                           tf::node<"hidden", tf::dense<8>, "features">,      //
                           tf::node<"priority", tf::dense<1>, "hidden">,      //
                           tf::node<"department", tf::dense<4>, "hidden">,    //
                           tf::outputs<"priority", "department">>;

// The mean absolute error written as one's own loss: the CPU runs it, the GPU has no kernel for it.
struct my_absolute_error {
  static constexpr std::string_view name = "my_absolute_error";
  static constexpr tf::losses::label_form labels = tf::losses::label_form::dense;
  static constexpr int min_classes = 1;
  void operator()(const float* out, const float* targets, std::ptrdiff_t rows, int width, std::ptrdiff_t valid,
                  float* d_out, float* row_loss) const {
    for (std::ptrdiff_t r = 0; r < rows; ++r) {
      row_loss[r] = 0.f;
      for (int j = 0; j < width; ++j) {
        const float e = r < valid ? out[r * width + j] - targets[r * width + j] : 0.f;
        row_loss[r] += (e < 0 ? -e : e) / static_cast<float>(width);
        d_out[r * width + j] = (e > 0) - (e < 0);
      }
    }
  }
};

int main() {
  tf::model<net, tf::float32, tf::single_device, tf::cuda> model;
  model.compile(tf::optimizers::sgd{}, tf::on_output<"priority">(my_absolute_error{}),
                tf::on_output<"department">(tf::losses::sparse_categorical_crossentropy{.from_logits = true}));
}

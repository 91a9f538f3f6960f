// callbacks::swap_ema_weights: Keras's SwapEMAWeights, for an optimizer with
// use_ema = true.
//
//   tf::callbacks::swap_ema_weights swap;                        // validation uses the averages
//   tf::callbacks::swap_ema_weights swap_epoch({.swap_on_epoch = true});  // so do later callbacks
//   model.fit(train, {.epochs = 10, .validation_data = test, .callbacks = {&swap, &checkpoint}});
//
// Fit's validation at each epoch's end runs with the moving averages in
// place of the weights (swapped in at on_test_begin, back at on_test_end).
// With swap_on_epoch, the averages are in the weights from each epoch's end
// to the next epoch's beginning, so that callbacks placed after it (a
// model_checkpoint) see and save them. Whether they are swapped in is the
// model's (model.ema_weights_in_model()), and a checkpoint keeps it.
#pragma once

#include "typeflow/callbacks/callback.hpp"

namespace typeflow::callbacks {

struct swap_ema_weights_options {
  bool swap_on_epoch = false;
};

class swap_ema_weights : public callback {
 public:
  explicit swap_ema_weights(swap_ema_weights_options options = {}) : options_(options) {}

  void on_epoch_begin(const epoch_info&) override {
    if (options_.swap_on_epoch && model() && model()->ema_weights_in_model()) model()->swap_ema_weights();
  }
  void on_test_begin() override {
    if (model() && !model()->ema_weights_in_model()) model()->swap_ema_weights();
  }
  void on_test_end(const logs&) override {
    if (model() && model()->ema_weights_in_model()) model()->swap_ema_weights();
  }
  void on_epoch_end(const epoch_info&, const logs&) override {
    if (options_.swap_on_epoch && model() && !model()->ema_weights_in_model()) model()->swap_ema_weights();
  }

 private:
  swap_ema_weights_options options_;
};

}  // namespace typeflow::callbacks

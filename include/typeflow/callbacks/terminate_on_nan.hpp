// callbacks::terminate_on_nan: Keras's TerminateOnNaN.
//
//   tf::callbacks::terminate_on_nan stop;
//   model.fit(train, {.epochs = 10, .callbacks = {&stop}});
//   if (stop.terminated()) std::puts(stop.reason().c_str());
//
// Without it, a non-finite loss or gradient makes fit throw
// non_finite_error (train/non_finite.hpp). With it, fit ends the run
// cleanly instead: the step that went wrong is not applied, the epoch ends
// there (its logs are the means over the good batches, History records it,
// validation runs), every callback's on_epoch_end and on_train_end run (so
// what they save is saved), and fit returns. As Keras, it prints
// "Batch <n>: Invalid loss, terminating training".
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "typeflow/callbacks/callback.hpp"

namespace typeflow::callbacks {

class terminate_on_nan : public callback {
 public:
  bool terminated() const noexcept { return terminated_; }
  int epoch() const noexcept { return epoch_; }          // 0-based, the epoch it stopped in
  std::int64_t batch() const noexcept { return batch_; }  // 1-based in that epoch, the batch not applied
  const std::string& reason() const noexcept { return reason_; }

  void on_train_begin() override { terminated_ = false; }

  // fit calls this when a step was not finite: the run ends here.
  bool ends_run_on_non_finite(int epoch, std::int64_t batch, const std::string& reason) override {
    terminated_ = true;
    epoch_ = epoch;
    batch_ = batch;
    reason_ = reason;
    std::printf("\nBatch %lld: Invalid loss, terminating training\n", static_cast<long long>(batch));
    std::fflush(stdout);
    return true;
  }

 private:
  bool terminated_ = false;
  int epoch_ = 0;
  std::int64_t batch_ = 0;
  std::string reason_;
};

}  // namespace typeflow::callbacks

// callbacks::lambda_callback: Keras's LambdaCallback, a callback from functions.
//
//   tf::callbacks::lambda_callback print_loss({
//       .on_epoch_end = [](int epoch, const tf::logs& l) { std::printf("%d %g\n", epoch, *l.get("loss")); }});
//
// Each function is optional; epoch is 0-based and batch 1-based in its epoch,
// as the other callbacks see them.
#pragma once

#include <cstdint>
#include <functional>

#include "typeflow/callbacks/callback.hpp"

namespace typeflow::callbacks {

// Keras's hooks by their Keras names: fit's, evaluate's (and fit's
// validation's) on_test_*, predict's on_predict_* (evaluate and predict take
// callbacks as their second argument).
struct lambda_callback_options {
  std::function<void(int epoch)> on_epoch_begin{};
  std::function<void(int epoch, const logs&)> on_epoch_end{};
  std::function<void(std::int64_t batch, const logs&)> on_train_batch_end{};
  std::function<void()> on_train_begin{};
  std::function<void(const logs&)> on_train_end{};
  std::function<void(std::int64_t batch)> on_train_batch_begin{};
  std::function<void()> on_test_begin{};
  std::function<void(const logs&)> on_test_end{};
  std::function<void(std::int64_t batch)> on_test_batch_begin{};
  std::function<void(std::int64_t batch, const logs&)> on_test_batch_end{};
  std::function<void()> on_predict_begin{};
  std::function<void()> on_predict_end{};
  std::function<void(std::int64_t batch)> on_predict_batch_begin{};
  std::function<void(std::int64_t batch)> on_predict_batch_end{};
};

class lambda_callback : public callback {
 public:
  explicit lambda_callback(lambda_callback_options functions) : f_(std::move(functions)) {}
  void on_train_begin() override {
    if (f_.on_train_begin) f_.on_train_begin();
  }
  void on_epoch_begin(const epoch_info& info) override {
    if (f_.on_epoch_begin) f_.on_epoch_begin(info.epoch);
  }
  void on_batch_begin(std::int64_t step) override {
    if (f_.on_train_batch_begin) f_.on_train_batch_begin(step);
  }
  void on_test_begin() override {
    if (f_.on_test_begin) f_.on_test_begin();
  }
  void on_test_end(const logs& l) override {
    if (f_.on_test_end) f_.on_test_end(l);
  }
  void on_test_batch_begin(std::int64_t batch) override {
    if (f_.on_test_batch_begin) f_.on_test_batch_begin(batch);
  }
  void on_test_batch_end(std::int64_t batch, const logs& l) override {
    if (f_.on_test_batch_end) f_.on_test_batch_end(batch, l);
  }
  void on_predict_begin() override {
    if (f_.on_predict_begin) f_.on_predict_begin();
  }
  void on_predict_end() override {
    if (f_.on_predict_end) f_.on_predict_end();
  }
  void on_predict_batch_begin(std::int64_t batch) override {
    if (f_.on_predict_batch_begin) f_.on_predict_batch_begin(batch);
  }
  void on_predict_batch_end(std::int64_t batch) override {
    if (f_.on_predict_batch_end) f_.on_predict_batch_end(batch);
  }
  void on_batch_end(std::int64_t step, const logs& l) override {
    if (f_.on_train_batch_end) f_.on_train_batch_end(step, l);
  }
  void on_epoch_end(const epoch_info& info, const logs& l) override {
    if (f_.on_epoch_end) f_.on_epoch_end(info.epoch, l);
  }
  void on_train_end(const logs& l) override {
    if (f_.on_train_end) f_.on_train_end(l);
  }

 private:
  lambda_callback_options f_;
};

}  // namespace typeflow::callbacks

// Keras's callbacks against the behaviour Keras documents: scripted monitor
// sequences through a recording model, and real fits.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <typeflow/typeflow.hpp>

#include "../support/test_support.hpp"

namespace tf = typeflow;
namespace fs = std::filesystem;
namespace tf_testing = typeflow::testing;

namespace {

// A model that records what callbacks ask of it; its "weights" are one
// float, the epoch that last set them.
struct recording_model final : tf::model_access {
  bool stopped = false;
  std::vector<float> weights{0.f};
  std::vector<std::string> saved;
  void stop_training() override { stopped = true; }
  bool stop_requested() const override { return stopped; }
  std::vector<float> get_weight_region() const override { return weights; }
  void set_weight_region(std::span<const float> w) override { weights.assign(w.begin(), w.end()); }
  void save_weights(const fs::path& p) override { saved.push_back("weights " + p.string()); }
  fs::path save_checkpoint(const fs::path& p, int) override {
    saved.push_back("checkpoint " + p.string());
    return p;
  }
  void load_checkpoint(const fs::path& p) override { saved.push_back("load " + p.string()); }
  bool is_chief() const override { return true; }
  double rate = 0.1;
  double learning_rate() const override { return rate; }
  void set_learning_rate(double r) override { rate = r; }
  void swap_ema_weights() override {}
  bool ema_weights_in_model() const override { return false; }
  void finalize_variable_values() override {}
};

// Runs `c` over epochs whose `name` entry takes the values given (the
// weights become the epoch number before each epoch ends); returns the
// epoch after which training was asked to stop, or -1.
int run_epochs(tf::callback& c, recording_model& m, const char* name, const std::vector<double>& values) {
  c.set_model(&m);
  c.on_train_begin();
  tf::logs l;
  int stopped_after = -1;
  for (int e = 0; e < static_cast<int>(values.size()); ++e) {
    c.on_epoch_begin({e, static_cast<int>(values.size()), 1});
    m.weights = {static_cast<float>(e)};
    l.set(name, values[static_cast<std::size_t>(e)]);
    c.on_epoch_end({e, static_cast<int>(values.size()), 1}, l);
    if (m.stopped) {
      stopped_after = e;
      break;
    }
  }
  c.on_train_end(l);
  return stopped_after;
}

using net = tf::sequential<tf::input<8>, tf::dense<16>, tf::relu, tf::dense<3>>;
auto dataset() {
  std::vector<float> x(64 * 8);
  std::vector<std::int32_t> y(64);
  const tf::random_stream rng{5, 2};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 2.f * rng.uniform(i) - 1.f;
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = x[i * 8] > 0.f ? 1 : (x[i * 8 + 1] > 0.f ? 2 : 0);
  return tf::data::from_tensor_slices<tf::shape<8>>(std::move(x), std::move(y)) | tf::data::batch<16>;
}
template <class Model>
void compile(Model& m) {
  m.compile(tf::optimizers::adam{.learning_rate = 0.01}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
            tf::metrics::accuracy{});
}

}  // namespace

TEST_CASE("early_stopping: patience counts the epochs without improvement, as Keras's EarlyStopping") {
  recording_model m;
  tf::callbacks::early_stopping stop({.monitor = "val_loss", .patience = 2, .restore_best_weights = true});
  // best 0.9 at epoch 1; epochs 2 and 3 do not improve: the wait reaches 2 at epoch 3.
  CHECK(run_epochs(stop, m, "val_loss", {1.0, 0.9, 0.95, 0.92, 0.5}) == 3);
  CHECK(stop.stopped_epoch() == 3);
  CHECK(stop.best_epoch() == 1);
  CHECK(*stop.best() == 0.9);
  CHECK(m.weights == std::vector<float>{1.f});  // restored: the best epoch's

  recording_model again;
  tf::callbacks::early_stopping patient({.monitor = "val_loss", .patience = 3});
  CHECK(run_epochs(patient, again, "val_loss", {1.0, 0.9, 0.95, 0.92, 0.5, 0.6, 0.7, 0.8}) == 7);
  CHECK(again.weights == std::vector<float>{7.f});  // not restored without restore_best_weights
}

TEST_CASE("early_stopping: min_delta, mode, baseline and start_from_epoch") {
  recording_model a;
  tf::callbacks::early_stopping delta({.monitor = "loss", .min_delta = 0.1, .patience = 1});
  CHECK(run_epochs(delta, a, "loss", {1.0, 0.95, 0.85, 0.5}) == 1);  // 0.95 is not 0.1 better than 1.0

  recording_model b;  // "accuracy" is maximised under mode "auto"
  tf::callbacks::early_stopping accuracy({.monitor = "val_accuracy", .patience = 1});
  CHECK(run_epochs(accuracy, b, "val_accuracy", {0.5, 0.6, 0.7, 0.65, 0.9}) == 3);
  recording_model b2;  // and minimised under "min"
  tf::callbacks::early_stopping inverted({.monitor = "val_accuracy", .patience = 1, .mode = "min"});
  CHECK(run_epochs(inverted, b2, "val_accuracy", {0.5, 0.6, 0.7}) == 1);

  recording_model c;  // a best that does not beat the baseline leaves the wait running
  tf::callbacks::early_stopping base({.monitor = "loss", .patience = 2, .baseline = 0.5});
  CHECK(run_epochs(base, c, "loss", {1.0, 1.1, 1.2, 0.4}) == 1);
  recording_model c2;
  tf::callbacks::early_stopping no_base({.monitor = "loss", .patience = 2});
  CHECK(run_epochs(no_base, c2, "loss", {1.0, 1.1, 1.2, 0.4}) == 2);

  recording_model d;  // epochs before start_from_epoch are not monitored
  tf::callbacks::early_stopping late({.monitor = "loss", .patience = 0, .start_from_epoch = 2});
  CHECK(run_epochs(late, d, "loss", {1.0, 2.0, 3.0, 4.0}) == 3);

  recording_model e;  // restore_best_weights with no improvement ever: the first monitored epoch's
  tf::callbacks::early_stopping none({.monitor = "loss", .patience = 1, .restore_best_weights = true, .start_from_epoch = 1});
  CHECK(run_epochs(none, e, "loss", {0.1, 1.0, 2.0, 3.0}) == 2);
  CHECK(e.weights == std::vector<float>{1.f});

  CHECK_THROWS_WITH_AS(tf::callbacks::early_stopping({.mode = "largest"}), doctest::Contains("mode must be"),
                       std::invalid_argument);
}

TEST_CASE("early_stopping stops fit and restores the best weights") {
  tf::model<net> m{1};
  compile(m);
  // No epoch can improve the loss by 10: the first one sets the best, the second stops.
  tf::callbacks::early_stopping stop({.monitor = "loss", .min_delta = 10, .patience = 0, .restore_best_weights = true});
  std::vector<float> after_first;
  tf::callbacks::lambda_callback record({.on_epoch_end = [&](int epoch, const tf::logs&) {
    if (epoch == 0) after_first.assign(m.parameter_region().begin(), m.parameter_region().end());
  }});
  const auto h = m.fit(dataset(), {.epochs = 20, .callbacks = {&record, &stop}, .verbose = 0});
  CHECK(h["loss"].size() == 2);
  CHECK(stop.stopped_epoch() == 1);
  CHECK(m.iterations() == 8);
  const auto now = m.parameter_region();
  REQUIRE(after_first.size() == now.size());
  CHECK(std::equal(after_first.begin(), after_first.end(), now.begin()));  // epoch 1's weights, put back
}

TEST_CASE("model_checkpoint: save_best_only saves on improvement only, with the path formatted") {
  recording_model m;
  tf::callbacks::model_checkpoint best("w-{epoch:02d}-{val_loss:.2f}.safetensors",
                                       {.save_best_only = true, .save_weights_only = true});
  run_epochs(best, m, "val_loss", {1.0, 0.8, 0.9, 0.7});
  CHECK(m.saved == std::vector<std::string>{"weights w-01-1.00.safetensors", "weights w-02-0.80.safetensors",
                                            "weights w-04-0.70.safetensors"});
  CHECK(*best.best() == 0.7);

  recording_model threshold;
  tf::callbacks::model_checkpoint above("ckpt", {.monitor = "accuracy", .save_best_only = true,
                                                 .initial_value_threshold = 0.75});
  run_epochs(above, threshold, "accuracy", {0.5, 0.8, 0.7, 0.9});
  CHECK(threshold.saved == std::vector<std::string>{"checkpoint ckpt", "checkpoint ckpt"});

  recording_model every;
  tf::callbacks::model_checkpoint all("e{epoch}", {.save_weights_only = true});
  run_epochs(all, every, "loss", {3.0, 2.0, 4.0});
  CHECK(every.saved == std::vector<std::string>{"weights e1", "weights e2", "weights e3"});
}

TEST_CASE("model_checkpoint: a placeholder's spec is Python's [flags][width][.precision][type], refused when built") {
  // Before: "{epoch:s%d}" reached snprintf as "%s%lld" (a crash reading 0x1), "{epoch:n%d}" as "%n%lld".
  for (const char* bad : {"w-{epoch:s%d}", "w-{epoch:n%d}", "w-{batch:%n}", "w-{epoch:*d}", "w-{epoch:lld}",
                          "w-{epoch:999d}", "w-{epoch:.4f}", "w-{val_loss:d}", "w-{val_loss:.100f}", "w-{loss:5.f}"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(tf::callbacks::model_checkpoint{bad}, doctest::Contains("is not a spec of the form"),
                         std::invalid_argument);
  }
  const std::string long_name(100000, 'x');
  try {
    tf::callbacks::model_checkpoint{"w-{epoch:" + long_name + "}"};
    FAIL("a 100,000-character spec was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).size() < 600);  // quoted as an excerpt, not whole
  }
  recording_model m;
  tf::callbacks::model_checkpoint good("w-{epoch:+03d}-{batch}-{loss:08.3f}-{loss:e}-{loss}", {.save_weights_only = true});
  run_epochs(good, m, "loss", {0.5});
  CHECK(m.saved == std::vector<std::string>{"weights w-+01-0-0000.500-5.000000e-01-0.5"});
}

TEST_CASE("model_checkpoint in fit: weights each epoch, and checkpoints every n batches that resume") {
  tf_testing::temp_dir dir("typeflow_callbacks_test_model_checkpoint");
  tf::model<net> m{2};
  compile(m);
  tf::callbacks::model_checkpoint weights((dir.path / "w-{epoch:02d}.safetensors").string(), {.save_weights_only = true});
  tf::callbacks::model_checkpoint checkpoints(dir.path / "ckpt", {.save_freq = 3});
  m.fit(dataset(), {.epochs = 2, .callbacks = {&weights, &checkpoints}, .verbose = 0});
  CHECK(fs::exists(dir.path / "w-01.safetensors"));
  CHECK(fs::exists(dir.path / "w-02.safetensors"));
  // 8 batches in all: a checkpoint after the 3rd and after the 6th (updates 3 and 6)
  const auto kept = tf::io::list_checkpoints(dir.path / "ckpt");
  REQUIRE(kept.size() == 2);
  CHECK(kept.back().filename() == "ckpt-000000000006");
  tf::model<net> loaded{9};
  loaded.load_weights(dir.path / "w-02.safetensors");
  const auto a = loaded.parameter_region(), b = m.parameter_region();
  CHECK(std::equal(a.begin(), a.end(), b.begin()));
}

TEST_CASE("csv_logger: a header of the sorted names, a row per epoch, val_ columns, append") {
  tf_testing::temp_dir dir("typeflow_callbacks_test_csv");
  const fs::path path = dir.path / "log.csv";
  tf::model<net> m{3};
  compile(m);
  tf::callbacks::csv_logger log(path);
  const auto h = m.fit(dataset(), {.epochs = 2, .callbacks = {&log}, .verbose = 0});
  std::ifstream in(path);
  std::string header, row1, row2, extra;
  std::getline(in, header);
  std::getline(in, row1);
  std::getline(in, row2);
  CHECK(!std::getline(in, extra));
  CHECK(header == "epoch,accuracy,input_wait_fraction,learning_rate,loss,mfu,val_accuracy,val_input_wait_fraction,"
                  "val_learning_rate,val_loss,val_mfu");
  CHECK(row1.rfind("0,", 0) == 0);
  CHECK(row2.rfind("1,", 0) == 0);
  CHECK(row2.substr(row2.size() - 3) == ",NA");  // no validation data
  // The loss column reads back as the History's value, exactly.
  std::vector<std::string> cells;
  std::stringstream cut(row2);
  for (std::string c; std::getline(cut, c, ',');) cells.push_back(c);
  REQUIRE(cells.size() == 11);
  CHECK(std::stod(cells[4]) == h["loss"][1]);

  tf::callbacks::csv_logger more(path, {.separator = ";", .append = true});
  m.fit(dataset(), {.epochs = 1, .callbacks = {&more}, .verbose = 0});
  std::ifstream again(path);
  int lines = 0;
  std::string last;
  for (std::string line; std::getline(again, line); ++lines) last = line;
  CHECK(lines == 4);  // no second header
  CHECK(last.rfind("0;", 0) == 0);
}

TEST_CASE("lambda_callback calls what it is given, in fit's order") {
  tf::model<net> m{4};
  compile(m);
  std::vector<std::string> calls;
  tf::callbacks::lambda_callback trace({
      .on_epoch_begin = [&](int e) { calls.push_back("epoch_begin " + std::to_string(e)); },
      .on_epoch_end = [&](int e, const tf::logs& l) {
        calls.push_back("epoch_end " + std::to_string(e) + (l.get("loss") ? " loss" : ""));
      },
      .on_train_batch_end = [&](std::int64_t b, const tf::logs&) { calls.push_back("batch " + std::to_string(b)); },
      .on_train_begin = [&] { calls.push_back("train_begin"); },
      .on_train_end = [&](const tf::logs&) { calls.push_back("train_end"); },
  });
  m.fit(dataset(), {.epochs = 1, .callbacks = {&trace}, .verbose = 0});
  CHECK(calls == std::vector<std::string>{"train_begin", "epoch_begin 0", "batch 1", "batch 2", "batch 3", "batch 4",
                                          "epoch_end 0 loss", "train_end"});
}

TEST_CASE("lambda_callback's Keras hooks: on_train_batch_begin before each step, on_test_begin and on_test_end around validation") {
  tf::model<net> m{4};
  compile(m);
  std::vector<std::string> calls;
  double iterations_at_begin = -1;
  tf::callbacks::lambda_callback trace({
      .on_epoch_end = [&](int e, const tf::logs& l) {
        calls.push_back("epoch_end " + std::to_string(e) + (l.get("val_loss") ? " val_loss" : ""));
      },
      .on_train_batch_end = [&](std::int64_t b, const tf::logs&) { calls.push_back("end " + std::to_string(b)); },
      .on_train_batch_begin =
          [&](std::int64_t b) {
            calls.push_back("begin " + std::to_string(b));
            if (b == 3) iterations_at_begin = static_cast<double>(m.iterations());  // before step 3's update
          },
      .on_test_begin = [&] { calls.push_back("test_begin"); },
      .on_test_end = [&](const tf::logs& l) { calls.push_back(std::string("test_end") + (l.get("val_loss") ? " val_loss" : "")); },
  });
  m.fit(dataset(), {.epochs = 1, .validation_data = dataset(), .callbacks = {&trace}, .verbose = 0});
  CHECK(calls == std::vector<std::string>{"begin 1", "end 1", "begin 2", "end 2", "begin 3", "end 3", "begin 4", "end 4",
                                          "test_begin", "test_end val_loss", "epoch_end 0 val_loss"});
  CHECK(iterations_at_begin == 2);
}

TEST_CASE("lambda_callback's test and predict hooks: evaluate, fit's validation and predict call them per batch") {
  tf::model<net> m{4};
  compile(m);
  std::vector<std::string> calls;
  double last_running_loss = -1;
  tf::callbacks::lambda_callback trace({
      .on_test_begin = [&] { calls.push_back("test_begin"); },
      .on_test_end = [&](const tf::logs& l) { calls.push_back(std::string("test_end") + (l.get("loss") ? " loss" : "")); },
      .on_test_batch_begin = [&](std::int64_t b) { calls.push_back("test " + std::to_string(b)); },
      .on_test_batch_end = [&](std::int64_t, const tf::logs& l) { last_running_loss = *l.get("loss"); },
      .on_predict_begin = [&] { calls.push_back("predict_begin"); },
      .on_predict_end = [&] { calls.push_back("predict_end"); },
      .on_predict_batch_begin = [&](std::int64_t b) { calls.push_back("predict " + std::to_string(b)); },
      .on_predict_batch_end = [&](std::int64_t b) { calls.push_back("predicted " + std::to_string(b)); },
  });
  const auto result = m.evaluate(dataset(), {&trace});
  CHECK(calls == std::vector<std::string>{"test_begin", "test 1", "test 2", "test 3", "test 4", "test_end loss"});
  CHECK(last_running_loss == doctest::Approx(result.at("loss")));  // after the last batch: the whole mean
  calls.clear();
  m.predict(dataset(), {&trace});
  CHECK(calls == std::vector<std::string>{"predict_begin", "predict 1", "predicted 1", "predict 2", "predicted 2",
                                          "predict 3", "predicted 3", "predict 4", "predicted 4", "predict_end"});
  calls.clear();
  m.fit(dataset(), {.epochs = 1, .validation_data = dataset() | tf::data::take(2), .callbacks = {&trace}, .verbose = 0});
  CHECK(calls == std::vector<std::string>{"test_begin", "test 1", "test 2", "test_end loss"});
  CHECK(trace.model() == nullptr);  // outside fit, evaluate and predict, a callback has no model
}

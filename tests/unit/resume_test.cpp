// A fit continued from a checkpoint written during it: backup_and_restore
// after a crash mid-epoch continues at the exact batch, and the per-step
// losses, weights, optimizer slots and History equal an uninterrupted run's
// bit for bit; callbacks get their state back; the learning rate a
// callback set survives.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <typeflow/typeflow.hpp>

#include "../support/resume_fixture.hpp"
#include "../support/test_support.hpp"

namespace tf = typeflow;
namespace fs = std::filesystem;
namespace tf_testing = typeflow::testing;

using typeflow::testing::same_bits;

namespace {

using net = tf_testing::dropout_classifier;

auto dataset() { return tf_testing::classifier_data(); }

template <class Model>
void compile_adam(Model& m, double rate = 0.01) {
  m.compile(tf::optimizers::adam{.learning_rate = rate}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
            tf::metrics::accuracy{});
}

// Two Histories' values, but for the timings (which differ between runs).
bool same_history(const tf::history& a, const tf::history& b) {
  auto x = a.values, y = b.values;
  for (auto* h : {&x, &y}) {
    h->erase("input_wait_fraction");
    h->erase("tokens_per_second");
    h->erase("mfu");
  }
  return !x.empty() && x == y;
}

// Each batch's running loss and accuracy, as fit reported them.
struct step_record {
  std::vector<double> loss, accuracy;
  tf::callbacks::lambda_callback callback{{.on_train_batch_end = [this](std::int64_t, const tf::logs& l) {
    loss.push_back(*l.get("loss"));
    accuracy.push_back(*l.get("accuracy"));
  }}};
};

struct crash : std::runtime_error {
  crash() : std::runtime_error("simulated crash") {}
};
// Throws after the n-th batch of the fit (counting from 1 over all epochs).
struct crash_after {
  std::int64_t n, seen = 0;
  tf::callbacks::lambda_callback callback{{.on_train_batch_end = [this](std::int64_t, const tf::logs&) {
    if (++seen == n) throw crash{};
  }}};
};

}  // namespace

TEST_CASE("backup_and_restore: a fit that crashed mid-epoch continues at the exact batch, bit for bit") {
  tf_testing::temp_dir dir("typeflow_resume_test_backup");
  const fs::path backup = dir.path / "backup";

  tf::model<net> whole{5};
  compile_adam(whole);
  step_record whole_steps;
  const auto h = whole.fit(dataset(), {.epochs = 3, .callbacks = {&whole_steps.callback}, .verbose = 0});

  // Backups after every 4th batch; the crash comes after batch 11 (epoch 2,
  // its 5th batch): the newest backup is after batch 8 (epoch 2, batch 2).
  {
    tf::model<net> first{5};
    compile_adam(first);
    tf::callbacks::backup_and_restore saver(backup, {.save_freq = 4});
    crash_after crasher{11};
    CHECK_THROWS_AS(first.fit(dataset(), {.epochs = 3, .callbacks = {&saver, &crasher.callback}, .verbose = 0}), crash);
    const auto kept = tf::io::list_checkpoints(backup);
    REQUIRE(kept.size() == 1);
    CHECK(kept.back().filename() == "ckpt-000000000008");
  }

  tf::model<net> resumed{777};  // another seed: the checkpoint's is restored
  compile_adam(resumed);
  tf::callbacks::backup_and_restore restorer(backup, {.save_freq = 4});
  step_record resumed_steps;
  const auto h2 = resumed.fit(dataset(), {.epochs = 3, .callbacks = {&restorer, &resumed_steps.callback}, .verbose = 0});
  CHECK(restorer.restored());
  // 10 batches followed the backup: batches 9 .. 18 of the run, with the
  // same running means (epoch 2's first two batches were put back).
  REQUIRE(resumed_steps.loss.size() == 10);
  for (std::size_t i = 0; i < 10; ++i) {
    CHECK(resumed_steps.loss[i] == whole_steps.loss[8 + i]);
    CHECK(resumed_steps.accuracy[i] == whole_steps.accuracy[8 + i]);
  }
  CHECK(same_bits(resumed.parameter_region(), whole.parameter_region()));
  CHECK(resumed.iterations() == whole.iterations());
  // The History holds all three epochs, the first from the backup, equal to the whole run's.
  CHECK(same_history(h2, h));
  // Training ended: the backup is gone (Keras's delete_checkpoint).
  CHECK(!fs::exists(backup));

  // The optimizer's slots too: a checkpoint of each, compared tensor by tensor.
  const auto a = resumed.save_checkpoint(dir.path / "a"), b = whole.save_checkpoint(dir.path / "b");
  const auto x = tf::io::read_checkpoint(a), y = tf::io::read_checkpoint(b);
  for (const auto& t : y.tensors.tensors()) {
    const auto p = x.tensors.data(t.name), q = y.tensors.data(t.name);
    CHECK_MESSAGE((p.size() == q.size() && std::memcmp(p.data(), q.data(), p.size()) == 0), t.name);
  }
}

// Four sources interleaved, cached, repeated, mapped on two threads,
// shuffled, batched and prefetched: 2 x 160 samples an epoch, 10 batches.
// (The cache holds what comes before it in the order of its first pass, so
// nothing before it may depend on the epoch: as with tf.data, shuffle after
// cache. docs/checkpoints.md, "Continuing a fit".)
auto every_stage() {
  auto chunks = std::make_shared<std::vector<std::vector<float>>>();
  const tf::random_stream rng{29, 1};
  for (int c = 0; c < 4; ++c) {
    std::vector<float> x(40 * 12);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 2.f * rng.uniform(static_cast<std::uint64_t>(c) * 1000 + i) - 1.f;
    chunks->push_back(std::move(x));
  }
  return tf::data::range(4) | tf::data::interleave(
                                  [chunks](std::int64_t c) {
                                    const auto& x = (*chunks)[static_cast<std::size_t>(c)];
                                    std::vector<std::int32_t> y(40);
                                    for (int i = 0; i < 40; ++i)
                                      y[i] = (x[i * 12] > 0.f ? 1 : 0) + (x[i * 12 + 1] > 0.5f ? 2 : 0);
                                    return tf::data::from_tensor_slices<tf::shape<12>>(x, std::move(y));
                                  },
                                  2, 3) |
         tf::data::cache() | tf::data::repeat(2) |
         tf::data::map([](auto e) {
           for (auto& v : e.features.values) v = 0.5f * v + 0.25f;
           return e;
         }, 2) |
         tf::data::shuffle(64, 11) | tf::data::batch<32> | tf::data::prefetch(2);
}

TEST_CASE("backup_and_restore: mid-epoch through interleave, cache, repeat, map, shuffle and prefetch") {
  tf_testing::temp_dir dir("typeflow_resume_test_stages");
  tf::model<net> whole{12};
  compile_adam(whole);
  step_record whole_steps;
  whole.fit(every_stage(), {.epochs = 2, .callbacks = {&whole_steps.callback}, .verbose = 0});
  REQUIRE(whole_steps.loss.size() == 20);
  {
    tf::model<net> first{12};
    compile_adam(first);
    tf::callbacks::backup_and_restore saver(dir.path, {.save_freq = 7});
    crash_after crasher{16};  // the newest backup: after batch 14, the 4th of epoch 2
    CHECK_THROWS_AS(first.fit(every_stage(), {.epochs = 2, .callbacks = {&saver, &crasher.callback}, .verbose = 0}),
                    crash);
  }
  tf::model<net> resumed{12};
  compile_adam(resumed);
  tf::callbacks::backup_and_restore restorer(dir.path, {.save_freq = 7});
  step_record resumed_steps;
  resumed.fit(every_stage(), {.epochs = 2, .callbacks = {&restorer, &resumed_steps.callback}, .verbose = 0});
  REQUIRE(resumed_steps.loss.size() == 6);
  for (std::size_t i = 0; i < 6; ++i) CHECK(resumed_steps.loss[i] == whole_steps.loss[14 + i]);
  CHECK(same_bits(resumed.parameter_region(), whole.parameter_region()));
}

TEST_CASE("backup_and_restore: saved each epoch, a crash between epochs continues at the next epoch") {
  tf_testing::temp_dir dir("typeflow_resume_test_epochs");
  tf::model<net> whole{8};
  compile_adam(whole);
  const auto h = whole.fit(dataset(), {.epochs = 3, .verbose = 0});
  {
    tf::model<net> first{8};
    compile_adam(first);
    tf::callbacks::backup_and_restore saver(dir.path, {.delete_checkpoint = false});
    crash_after crasher{14};  // in epoch 3: the backup after epoch 2 is the newest
    CHECK_THROWS_AS(first.fit(dataset(), {.epochs = 3, .callbacks = {&saver, &crasher.callback}, .verbose = 0}), crash);
  }
  tf::model<net> resumed{8};
  compile_adam(resumed);
  tf::callbacks::backup_and_restore restorer(dir.path, {.delete_checkpoint = false});
  std::vector<int> epochs_begun;
  tf::callbacks::lambda_callback trace({.on_epoch_begin = [&](int e) { epochs_begun.push_back(e); }});
  const auto h2 = resumed.fit(dataset(), {.epochs = 3, .callbacks = {&restorer, &trace}, .verbose = 0});
  CHECK(epochs_begun == std::vector<int>{2});  // epochs 0 and 1 are not trained again
  CHECK(same_history(h2, h));
  CHECK(same_bits(resumed.parameter_region(), whole.parameter_region()));
  CHECK(!tf::io::list_checkpoints(dir.path).empty());  // delete_checkpoint = false keeps it
}

TEST_CASE("backup_and_restore: double_checkpoint falls back to the previous backup when the newest is corrupt") {
  tf_testing::temp_dir dir("typeflow_resume_test_double");
  tf::model<net> first{3};
  compile_adam(first);
  tf::callbacks::backup_and_restore saver(dir.path, {.save_freq = 2, .double_checkpoint = true});
  crash_after crasher{5};
  CHECK_THROWS_AS(first.fit(dataset(), {.epochs = 1, .callbacks = {&saver, &crasher.callback}, .verbose = 0}), crash);
  const auto kept = tf::io::list_checkpoints(dir.path);
  REQUIRE(kept.size() == 2);  // after batches 2 and 4
  std::ofstream(kept.back() / "state.safetensors", std::ios::trunc) << "not a safetensors file";
  tf::model<net> resumed{3};
  compile_adam(resumed);
  tf::callbacks::backup_and_restore restorer(dir.path, {.save_freq = 2, .double_checkpoint = true});
  resumed.fit(dataset(), {.epochs = 1, .callbacks = {&restorer}, .verbose = 0});
  CHECK(restorer.restored_from() == kept.front());
  CHECK(resumed.iterations() == 6);

  // Without double_checkpoint, a corrupt newest backup is an error naming it.
  tf_testing::temp_dir single("typeflow_resume_test_single");
  tf::model<net> other{3};
  compile_adam(other);
  tf::callbacks::backup_and_restore one(single.path, {.save_freq = 2});
  crash_after again{3};
  CHECK_THROWS_AS(other.fit(dataset(), {.epochs = 1, .callbacks = {&one, &again.callback}, .verbose = 0}), crash);
  const auto only = tf::io::list_checkpoints(single.path);
  REQUIRE(only.size() == 1);
  std::ofstream(only.back() / "state.safetensors", std::ios::trunc) << "garbage";
  tf::model<net> last{3};
  compile_adam(last);
  tf::callbacks::backup_and_restore fails(single.path, {.save_freq = 2});
  CHECK_THROWS_WITH_AS(last.fit(dataset(), {.epochs = 1, .callbacks = {&fails}, .verbose = 0}),
                       doctest::Contains("state.safetensors"), std::exception);
}

TEST_CASE("checkpoint written mid-epoch: load_checkpoint then fit finishes that epoch first") {
  tf_testing::temp_dir dir("typeflow_resume_test_explicit");
  tf::model<net> whole{4};
  compile_adam(whole);
  const auto h = whole.fit(dataset(), {.epochs = 2, .verbose = 0});

  tf::model<net> first{4};
  compile_adam(first);
  tf::callbacks::lambda_callback save_at_9({.on_train_batch_end = [&](std::int64_t, const tf::logs&) {
    if (first.iterations() == 9) first.save_checkpoint(dir.path);
  }});
  first.fit(dataset(), {.epochs = 2, .callbacks = {&save_at_9}, .verbose = 0});

  tf::model<net> resumed{4};
  compile_adam(resumed);
  resumed.load_checkpoint(dir.path);
  const auto h2 = resumed.fit(dataset(), {.epochs = 2, .verbose = 0});
  CHECK(resumed.iterations() == 12);
  CHECK(same_history(h2, h));
  CHECK(same_bits(resumed.parameter_region(), whole.parameter_region()));

  // Other data with fewer batches than the checkpoint had trained: named.
  tf::model<net> short_data{4};
  compile_adam(short_data);
  short_data.load_checkpoint(dir.path);
  auto few = tf::data::from_tensor_slices<tf::shape<12>>(std::vector<float>(64 * 12), std::vector<std::int32_t>(64)) |
             tf::data::batch<32>;
  CHECK_THROWS_WITH_AS(short_data.fit(few, {.epochs = 2, .verbose = 0}),
                       doctest::Contains("continues epoch 2 after batch 3"), std::invalid_argument);
}

TEST_CASE("early_stopping and reduce_lr_on_plateau keep their state across a backup") {
  tf_testing::temp_dir dir("typeflow_resume_test_callback_state");
  const auto options_stop = tf::callbacks::early_stopping_options{.monitor = "loss", .min_delta = 10, .patience = 3,
                                                                  .restore_best_weights = true};
  const auto options_plateau = tf::callbacks::reduce_lr_on_plateau_options{.monitor = "loss", .factor = 0.5,
                                                                           .patience = 1, .min_delta = 10};
  // Uninterrupted: no epoch improves by 10, so the rate halves after epochs
  // 2, 3, 4 ... and training stops after epoch 4 with epoch 1's weights back.
  tf::model<net> whole{6};
  compile_adam(whole);
  tf::callbacks::early_stopping stop_whole(options_stop);
  tf::callbacks::reduce_lr_on_plateau plateau_whole(options_plateau);
  const auto h = whole.fit(dataset(), {.epochs = 6, .callbacks = {&stop_whole, &plateau_whole}, .verbose = 0});
  REQUIRE(stop_whole.stopped_epoch() == 3);
  CHECK(whole.learning_rate() == doctest::Approx(0.01 / 8));

  // Interrupted after epoch 2 (during epoch 3), continued by a new model and new callbacks.
  {
    tf::model<net> first{6};
    compile_adam(first);
    tf::callbacks::early_stopping stop(options_stop);
    tf::callbacks::reduce_lr_on_plateau plateau(options_plateau);
    tf::callbacks::backup_and_restore backup(dir.path);
    crash_after crasher{15};
    CHECK_THROWS_AS(
        first.fit(dataset(), {.epochs = 6, .callbacks = {&stop, &plateau, &backup, &crasher.callback}, .verbose = 0}),
        crash);
    CHECK(plateau.wait() == 0);
    CHECK(stop.wait() == 1);
  }
  tf::model<net> resumed{6};
  compile_adam(resumed);  // with the initial rate: the checkpoint's reduced one is restored
  tf::callbacks::early_stopping stop(options_stop);
  tf::callbacks::reduce_lr_on_plateau plateau(options_plateau);
  tf::callbacks::backup_and_restore backup(dir.path);
  const auto h2 = resumed.fit(dataset(), {.epochs = 6, .callbacks = {&stop, &plateau, &backup}, .verbose = 0});
  CHECK(stop.stopped_epoch() == 3);
  CHECK(stop.best_epoch() == stop_whole.best_epoch());
  CHECK(resumed.learning_rate() == whole.learning_rate());
  CHECK(same_history(h2, h));
  CHECK(same_bits(resumed.parameter_region(), whole.parameter_region()));  // epoch 1's, restored by both
}

TEST_CASE("csv_logger continued from a backup reads as one uninterrupted run") {
  tf_testing::temp_dir dir("typeflow_resume_test_csv");
  const fs::path whole_csv = dir.path / "whole.csv", resumed_csv = dir.path / "resumed.csv";
  tf::model<net> whole{2};
  compile_adam(whole);
  tf::callbacks::csv_logger whole_log(whole_csv);
  whole.fit(dataset(), {.epochs = 3, .callbacks = {&whole_log}, .verbose = 0});
  {
    tf::model<net> first{2};
    compile_adam(first);
    tf::callbacks::csv_logger log(resumed_csv);
    tf::callbacks::backup_and_restore backup(dir.path / "backup", {.save_freq = 5});
    crash_after crasher{13};  // after epoch 2's row; the newest backup (batch 10) had seen epoch 1's only
    CHECK_THROWS_AS(first.fit(dataset(), {.epochs = 3, .callbacks = {&log, &backup, &crasher.callback}, .verbose = 0}),
                    crash);
  }
  tf::model<net> resumed{2};
  compile_adam(resumed);
  tf::callbacks::csv_logger log(resumed_csv);
  tf::callbacks::backup_and_restore backup(dir.path / "backup", {.save_freq = 5});
  resumed.fit(dataset(), {.epochs = 3, .callbacks = {&log, &backup}, .verbose = 0});
  // Rows: epoch and the columns up to the first timing one (the timings differ between runs).
  std::ifstream a(whole_csv), b(resumed_csv);
  std::vector<std::string> rows_a, rows_b;
  for (std::string l; std::getline(a, l);) rows_a.push_back(l);
  for (std::string l; std::getline(b, l);) rows_b.push_back(l);
  REQUIRE(rows_a.size() == 4);
  REQUIRE(rows_b.size() == 4);
  CHECK(rows_a[0] == rows_b[0]);  // one header
  for (std::size_t r = 1; r < 4; ++r) {
    // epoch, accuracy: equal; input_wait_fraction differs; learning_rate, loss: equal
    const auto cells = [](const std::string& row) {
      std::vector<std::string> c;
      std::stringstream cut(row);
      for (std::string x; std::getline(cut, x, ',');) c.push_back(x);
      return c;
    };
    const auto x = cells(rows_a[r]), y = cells(rows_b[r]);
    REQUIRE(x.size() == y.size());
    CHECK(x[0] == y[0]);
    CHECK(x[1] == y[1]);
    CHECK(x[3] == y[3]);
    CHECK(x[4] == y[4]);
  }
}

TEST_CASE("reduce_lr_on_plateau follows Keras's ReduceLROnPlateau on a scripted monitor") {
  struct rate_model final : tf::model_access {
    double rate = 1.0;
    void stop_training() override {}
    bool stop_requested() const override { return false; }
    std::vector<float> get_weight_region() const override { return {}; }
    void set_weight_region(std::span<const float>) override {}
    void save_weights(const fs::path&) override {}
    fs::path save_checkpoint(const fs::path& p, int) override { return p; }
    void load_checkpoint(const fs::path&) override {}
    bool is_chief() const override { return true; }
    double learning_rate() const override { return rate; }
    void set_learning_rate(double r) override { rate = r; }
    void swap_ema_weights() override {}
    bool ema_weights_in_model() const override { return false; }
    void finalize_variable_values() override {}
  };
  const auto rates = [](tf::callbacks::reduce_lr_on_plateau_options o, const std::vector<double>& monitor) {
    rate_model m;
    tf::callbacks::reduce_lr_on_plateau c(o);
    c.set_model(&m);
    c.on_train_begin();
    std::vector<double> out;
    for (int e = 0; e < static_cast<int>(monitor.size()); ++e) {
      tf::logs l;
      l.set("val_loss", monitor[static_cast<std::size_t>(e)]);
      c.on_epoch_end({e, 10, 1}, l);
      out.push_back(m.rate);
    }
    return out;
  };
  // patience 2: two epochs without improvement, then * factor.
  CHECK(rates({.factor = 0.5, .patience = 2}, {1.0, 0.9, 0.95, 0.92, 0.91, 0.8, 0.85, 0.86}) ==
        std::vector<double>{1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25});
  // cooldown 2: after a reduction, the wait stays 0 in the epochs that
  // count the cooldown down (Keras: the second of them may reduce again).
  CHECK(rates({.factor = 0.5, .patience = 1, .cooldown = 2}, {1.0, 1.0, 1.0, 1.0, 1.0, 1.0}) ==
        std::vector<double>{1, 0.5, 0.5, 0.25, 0.25, 0.125});
  // min_lr: never below it; min_delta: a small gain is no improvement.
  CHECK(rates({.factor = 0.1, .patience = 1, .min_delta = 0.05, .min_lr = 0.05}, {1.0, 0.97, 0.96, 0.5, 0.49}) ==
        std::vector<double>{1, 0.1, 0.05, 0.05, 0.05});
  // mode max.
  CHECK(rates({.factor = 0.5, .patience = 1, .mode = "max"}, {0.1, 0.2, 0.15}) == std::vector<double>{1, 1, 0.5});
  CHECK_THROWS_WITH_AS(tf::callbacks::reduce_lr_on_plateau({.factor = 1.0}), doctest::Contains("factor"),
                       std::invalid_argument);
}

TEST_CASE("learning_rate_scheduler sets each epoch's rate, a schedule compiled in is refused, as in Keras") {
  tf::model<net> m{1};
  compile_adam(m, 0.01);
  std::vector<double> seen;
  tf::callbacks::learning_rate_scheduler halve([](int epoch, double rate) { return epoch == 0 ? rate : rate / 2; });
  tf::callbacks::lambda_callback trace({.on_epoch_end = [&](int, const tf::logs& l) { seen.push_back(*l.get("learning_rate")); }});
  m.fit(dataset(), {.epochs = 3, .callbacks = {&halve, &trace}, .verbose = 0});
  CHECK(seen == std::vector<double>{0.01, 0.005, 0.0025});
  CHECK(m.learning_rate() == 0.0025);

  // The rate it set is the one the update uses: a model compiled with the
  // set rate from the start takes the same steps.
  tf::model<net> a{2}, b{2};
  compile_adam(a, 0.01);
  compile_adam(b, 0.003);
  tf::callbacks::learning_rate_scheduler fixed([](int) { return 0.003; });
  a.fit(dataset(), {.epochs = 1, .callbacks = {&fixed}, .verbose = 0});
  b.fit(dataset(), {.epochs = 1, .verbose = 0});
  CHECK(same_bits(a.parameter_region(), b.parameter_region()));

  tf::model<net> scheduled{1};
  scheduled.compile(tf::optimizers::adam{.learning_rate = tf::schedules::cosine_decay{1e-2, 100}},
                    tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  CHECK_THROWS_WITH_AS(scheduled.fit(dataset(), {.epochs = 1, .callbacks = {&fixed}, .verbose = 0}),
                       doctest::Contains("cosine_decay schedule as its learning rate, so its learning rate is not settable"),
                       std::logic_error);
  // accumulate<K> sets its wrapped optimizer's rate.
  tf::model<net> accumulating{1};
  accumulating.compile(tf::optimizers::accumulate<2>(tf::optimizers::sgd{.learning_rate = 0.1}),
                       tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  accumulating.set_learning_rate(0.25);
  CHECK(accumulating.learning_rate() == 0.25);
}

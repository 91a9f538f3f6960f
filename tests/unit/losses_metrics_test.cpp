// Keras's losses and metrics beyond cross-entropy: each loss's rows against
// its formula computed in double, its gradient against central differences
// of the mean loss, and each metric against a count by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

namespace {

constexpr int rows = 3, width = 4;

// Outputs and targets of (rows, width): logits-like values, probabilities, and targets in [0, 1].
std::vector<float> values(int salt, float low, float high) {
  std::vector<float> v(rows * width);
  const tf::random_stream rng{11, static_cast<std::uint64_t>(salt)};
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = low + (high - low) * rng.uniform(i);
  return v;
}

// The mean loss over the first `valid` rows, from the loss's own rows.
template <class Loss>
double mean_loss(const Loss& loss, const std::vector<float>& y, const std::vector<float>& t, int valid) {
  std::vector<float> g(y.size()), row(rows);
  loss(y.data(), t.data(), rows, width, valid, g.data(), row.data());
  double sum = 0;
  for (int r = 0; r < valid; ++r) sum += row[static_cast<std::size_t>(r)];
  return sum / valid;
}

// Checks the loss's rows against `expected(y_row, t_row)` and its gradient
// against central differences of the mean over 2 valid rows (the third is
// padding: zero loss, zero gradient).
template <class Loss>
void check_loss(const Loss& loss, const std::vector<float>& y, const std::vector<float>& t,
                const std::function<double(const float*, const float*)>& expected, double tolerance = 1e-5) {
  constexpr int valid = 2;
  std::vector<float> g(y.size(), 7.f), row(rows, 7.f);
  loss(y.data(), t.data(), rows, width, valid, g.data(), row.data());
  for (int r = 0; r < valid; ++r)
    CHECK(row[static_cast<std::size_t>(r)] ==
          doctest::Approx(expected(&y[static_cast<std::size_t>(r * width)], &t[static_cast<std::size_t>(r * width)]))
              .epsilon(tolerance));
  CHECK(row[2] == 0.f);
  for (int j = 0; j < width; ++j) CHECK(g[static_cast<std::size_t>(2 * width + j)] == 0.f);
  for (std::size_t i = 0; i < static_cast<std::size_t>(valid * width); ++i) {
    const float h = 1e-3f;
    std::vector<float> up = y, down = y;
    up[i] += h;
    down[i] -= h;
    const double numeric = (mean_loss(loss, up, t, valid) - mean_loss(loss, down, t, valid)) / (2.0 * h);
    CHECK(g[i] == doctest::Approx(numeric).epsilon(2e-3).scale(1.0));
  }
}

double sigmoid(double z) { return 1 / (1 + std::exp(-z)); }

}  // namespace

TEST_CASE("mean_absolute_error and huber: Keras's formulas, each row's mean over its values") {
  const auto y = values(1, -2.f, 2.f), t = values(2, -2.f, 2.f);
  check_loss(tf::losses::mean_absolute_error{}, y, t, [](const float* a, const float* b) {
    double s = 0;
    for (int j = 0; j < width; ++j) s += std::fabs(static_cast<double>(a[j]) - b[j]);
    return s / width;
  });
  for (float delta : {1.f, 0.5f}) {
    check_loss(tf::losses::huber{.delta = delta}, y, t, [delta](const float* a, const float* b) {
      double s = 0;
      for (int j = 0; j < width; ++j) {
        const double e = static_cast<double>(a[j]) - b[j], m = std::fabs(e);
        s += m <= delta ? 0.5 * e * e : delta * m - 0.5 * delta * delta;
      }
      return s / width;
    });
  }
}

TEST_CASE("binary_crossentropy from logits and from probabilities, with label smoothing") {
  const auto z = values(3, -4.f, 4.f), t = values(4, 0.f, 1.f), p = values(5, 0.05f, 0.95f);
  for (float smoothing : {0.f, 0.2f}) {
    const auto smoothed = [smoothing](float target) { return target * (1.0 - smoothing) + 0.5 * smoothing; };
    check_loss(tf::losses::binary_crossentropy{.from_logits = true, .label_smoothing = smoothing}, z, t,
               [&](const float* a, const float* b) {
                 double s = 0;
                 for (int j = 0; j < width; ++j) {
                   const double q = sigmoid(a[j]), target = smoothed(b[j]);
                   s -= target * std::log(q) + (1 - target) * std::log(1 - q);
                 }
                 return s / width;
               });
    check_loss(tf::losses::binary_crossentropy{.label_smoothing = smoothing}, p, t, [&](const float* a, const float* b) {
      double s = 0;
      for (int j = 0; j < width; ++j) {
        const double target = smoothed(b[j]);
        s -= target * std::log(a[j]) + (1 - target) * std::log(1 - a[j]);
      }
      return s / width;
    });
  }
  // A probability of 0 or 1 is clipped at 1e-7, as Keras clips it, and has no gradient there.
  const float edge[4] = {0.f, 1.f, 0.5f, 0.5f}, target[4] = {1.f, 0.f, 1.f, 0.f};
  float g[4], row[1];
  tf::losses::binary_crossentropy{}(edge, target, 1, 4, 1, g, row);
  // (1 - 1e-7 in float32 is 1 - 2^-23, so the clipped 1 costs -ln(2^-23), as in Keras's float32.)
  const double high = 1.0 - static_cast<double>(1.f - 1e-7f);
  CHECK(row[0] == doctest::Approx((-std::log(1e-7) - std::log(high) - 2 * std::log(0.5)) / 4).epsilon(1e-4));
  CHECK(g[0] == 0.f);
  CHECK(g[1] == 0.f);
}

TEST_CASE("categorical_crossentropy's label_smoothing, kl_divergence and cosine_similarity") {
  const auto z = values(6, -3.f, 3.f), p = values(7, 0.05f, 0.9f), y = values(8, -1.f, 1.f);
  auto one_hot = std::vector<float>(rows * width, 0.f);
  for (int r = 0; r < rows; ++r) one_hot[static_cast<std::size_t>(r * width + r % width)] = 1.f;
  check_loss(tf::losses::categorical_crossentropy{.from_logits = true, .label_smoothing = 0.1f}, z, one_hot,
             [](const float* a, const float* b) {
               double lse = 0;
               for (int j = 0; j < width; ++j) lse += std::exp(static_cast<double>(a[j]));
               lse = std::log(lse);
               double s = 0;
               for (int j = 0; j < width; ++j) s += (b[j] * 0.9 + 0.1 / width) * (lse - a[j]);
               return s;
             });
  const auto t = values(9, 0.f, 1.f);
  check_loss(tf::losses::kl_divergence{}, p, t, [](const float* a, const float* b) {
    double s = 0;
    for (int j = 0; j < width; ++j) {
      const double target = std::max(static_cast<double>(b[j]), 1e-7);
      s += target * std::log(target / a[j]);
    }
    return s;
  });
  check_loss(tf::losses::cosine_similarity{}, y, t, [](const float* a, const float* b) {
    double ab = 0, aa = 0, bb = 0;
    for (int j = 0; j < width; ++j) {
      ab += static_cast<double>(a[j]) * b[j];
      aa += static_cast<double>(a[j]) * a[j];
      bb += static_cast<double>(b[j]) * b[j];
    }
    return -ab / std::sqrt(aa * bb);
  });
}

TEST_CASE("metrics: mean errors, top-k, precision, recall, f1 and auc as counted by hand") {
  const float out[8] = {0.9f, 0.2f, 0.6f, 0.4f, 0.7f, 0.1f, 0.3f, 0.8f};
  const float target[8] = {1.f, 0.f, 0.f, 1.f, 1.f, 0.f, 1.f, 1.f};
  // As 8 rows of one value: predicted positive (> 0.5) at 0, 2, 4, 7; actual at 0, 3, 4, 6, 7.
  tf::metrics::precision precision;
  tf::metrics::recall recall;
  tf::metrics::f1_score f1;
  precision.update(out, target, 8, 1);
  recall.update(out, target, 8, 1);
  f1.update(out, target, 8, 1);
  CHECK(precision.result() == doctest::Approx(3.0 / 4));
  CHECK(recall.result() == doctest::Approx(3.0 / 5));
  CHECK(f1.result() == doctest::Approx(2 * 0.75 * 0.6 / 1.35));
  // AUC: the fraction of (positive, negative) pairs ranked right, which the
  // 200 thresholds resolve exactly here (no two scores share a bucket).
  tf::metrics::auc auc;
  auc.update(out, target, 4, 2);  // the same values as (4, 2): counted per value
  int right = 0, pairs = 0;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j)
      if (target[i] == 1.f && target[j] == 0.f) right += out[i] > out[j], ++pairs;
  CHECK(auc.result() == doctest::Approx(static_cast<double>(right) / pairs));
  auc.reset();
  CHECK(auc.result() == 0.0);

  tf::metrics::mean_squared_error mse;
  tf::metrics::mean_absolute_error mae;
  mse.update(out, target, 2, 4);
  mae.update(out, target, 2, 4);
  double squares = 0, absolutes = 0;
  for (int i = 0; i < 8; ++i) {
    const double e = static_cast<double>(out[i]) - target[i];
    squares += e * e;
    absolutes += std::fabs(e);
  }
  CHECK(mse.result() == doctest::Approx(squares / 8));
  CHECK(mae.result() == doctest::Approx(absolutes / 8));

  // Top-k over (2, 4) scores: row 0 ranks class 2 second, row 1 ranks class 3 fourth.
  const float scores[8] = {0.1f, 0.5f, 0.3f, 0.1f, 0.4f, 0.3f, 0.2f, 0.1f};
  const std::int32_t ids[2] = {2, 3};
  tf::metrics::sparse_top_k_categorical_accuracy top2{.k = 2};
  top2.update(scores, ids, 2, 4);
  CHECK(top2.result() == doctest::Approx(0.5));
  tf::metrics::sparse_top_k_categorical_accuracy top4{.k = 4};
  top4.update(scores, ids, 2, 4);
  CHECK(top4.result() == doctest::Approx(1.0));
  const float one_hot[8] = {0, 0, 1, 0, 0, 0, 0, 1};
  tf::metrics::top_k_categorical_accuracy dense_top2{.k = 2};
  dense_top2.update(scores, one_hot, 2, 4);
  CHECK(dense_top2.result() == doctest::Approx(0.5));
}

TEST_CASE("a regression model trains with mean_absolute_error as its metric, and huber or binary_crossentropy as its loss") {
  // y = 2 x0 - x1 + 0.5, 256 samples.
  std::vector<float> x(256 * 2), y(256), positive(256);
  const tf::random_stream rng{3, 1};
  for (std::size_t i = 0; i < 256; ++i) {
    x[2 * i] = 2.f * rng.uniform(2 * i) - 1.f;
    x[2 * i + 1] = 2.f * rng.uniform(2 * i + 1) - 1.f;
    y[i] = 2.f * x[2 * i] - x[2 * i + 1] + 0.5f;
    positive[i] = y[i] > 0.5f ? 1.f : 0.f;
  }
  using regressor = tf::sequential<tf::input<2>, tf::dense<16>, tf::relu, tf::dense<1>>;
  auto data = tf::data::from_tensor_slices<tf::shape<2>, tf::shape<1>>(x, y) | tf::data::batch<32>;
  tf::model<regressor> model{1};
  model.compile(tf::optimizers::adam{.learning_rate = 0.02}, tf::losses::huber{}, tf::metrics::mean_absolute_error{},
                tf::metrics::mean_squared_error{});
  const double mae_before = model.evaluate(data).at("mean_absolute_error");
  const auto history = model.fit(data, {.epochs = 30, .verbose = 0});
  const auto after = model.evaluate(data);
  CHECK(after.at("mean_absolute_error") < 0.1);
  CHECK(after.at("mean_absolute_error") < mae_before / 5);
  // The metric over the epoch's data equals the mean |error| of predict's outputs.
  const auto predicted = model.predict(data);
  double absolute = 0;
  for (std::size_t i = 0; i < 256; ++i) absolute += std::fabs(static_cast<double>(predicted[i]) - y[i]);
  CHECK(after.at("mean_absolute_error") == doctest::Approx(absolute / 256).epsilon(1e-5));
  CHECK(history.values.count("mean_squared_error") == 1);

  auto labelled = tf::data::from_tensor_slices<tf::shape<2>, tf::shape<1>>(x, positive) | tf::data::batch<32>;
  tf::model<regressor> classifier{2};
  classifier.compile(tf::optimizers::adam{.learning_rate = 0.02}, tf::losses::binary_crossentropy{.from_logits = true},
                     tf::metrics::precision{.threshold = 0.f}, tf::metrics::recall{.threshold = 0.f});
  classifier.fit(labelled, {.epochs = 20, .verbose = 0});
  const auto scores = classifier.evaluate(labelled);
  CHECK(scores.at("loss") < 0.2);
  CHECK(scores.at("precision") > 0.9);
  CHECK(scores.at("recall") > 0.9);
  // With a sigmoid output, binary_crossentropy from probabilities, and auc over them.
  using probabilities = tf::sequential<tf::input<2>, tf::dense<16>, tf::relu, tf::dense<1>, tf::sigmoid>;
  tf::model<probabilities> calibrated{3};
  calibrated.compile(tf::optimizers::adam{.learning_rate = 0.02}, tf::losses::binary_crossentropy{}, tf::metrics::auc{},
                     tf::metrics::f1_score{});
  calibrated.fit(labelled, {.epochs = 20, .verbose = 0});
  const auto calibrated_scores = calibrated.evaluate(labelled);
  CHECK(calibrated_scores.at("auc") > 0.98);
  CHECK(calibrated_scores.at("f1_score") > 0.9);
}

TEST_CASE("a GPU's row weights replayed on the CPU: the captured mean over all rows equals the weighted mean over the valid ones") {
  // mirrored<2> at batch 8 (shards of 4), a last partial batch of 5 samples
  // (replica 0: 4, replica 1: 1), class_weight and sample weights, as
  // cuda_engine.hpp stages them (train/row_weights.hpp) and its step applies
  // them (merge_fn::scale_rows, the functor the GPU runs).
  constexpr int n = 8, shard = 4, replicas = 2, classes = 3, valid = 5;
  tf::data::batch_of<n, tf::data::tensor_value<float, tf::shape<1>>, tf::data::tensor_value<std::int32_t, tf::shape<>>> b;
  b.valid = valid;
  b.labels = {0, 1, 2, 1, 0, 0, 0, 0};
  b.sample_weights = {0.5f, 1.f, 2.f, 0.f, 1.5f, 0.f, 0.f, 0.f};
  const std::vector<float> table = tf::class_weight_table({{1, 3.f}}, classes);
  REQUIRE(tf::weighs_rows(b, table));
  std::vector<float> outputs(n * classes);
  const tf::random_stream rng{5, 0};
  for (std::size_t i = 0; i < outputs.size(); ++i) outputs[i] = 2.f * rng.uniform(i) - 1.f;
  const tf::losses::sparse_categorical_crossentropy loss{.from_logits = true};

  // The expected step: (1/V) sum over valid rows of w * loss, and each valid row's gradient w * g / V.
  std::vector<float> d_all(n * classes), row_all(n);
  loss(outputs.data(), b.labels.data(), n, classes, valid, d_all.data(), row_all.data());  // g / valid
  double expected_loss = 0;
  for (int i = 0; i < valid; ++i) {
    const float w = tf::class_weight_of_row(table, b.labels.data(), i, classes) * b.sample_weights[static_cast<std::size_t>(i)];
    expected_loss += w * row_all[static_cast<std::size_t>(i)] / valid;
    for (int j = 0; j < classes; ++j) d_all[static_cast<std::size_t>(i * classes + j)] *= w;
  }

  // The GPU's: each replica's loss over all its 4 rows, weighed, then the mean over replicas.
  double step_loss = 0;
  for (int k = 0; k < replicas; ++k) {
    std::vector<float> d(shard * classes), row(shard), w(shard);
    const std::size_t at = static_cast<std::size_t>(k * shard);
    loss(outputs.data() + at * classes, b.labels.data() + at, shard, classes, shard, d.data(), row.data());
    tf::replica_row_weights(b, table, k, replicas, shard, 1, classes, tf::replica_valid(valid, k, shard), w.data());
    const tf::detail::merge_fn::scale_rows by_row{w.data(), d.data(), d.data(), classes}, loss_by_row{w.data(), row.data(), row.data(), 1};
    for (std::size_t i = 0; i < d.size(); ++i) by_row(i);
    for (std::size_t i = 0; i < row.size(); ++i) loss_by_row(i);
    double mean = 0;
    for (const float l : row) mean += l / shard;
    step_loss += mean / replicas;
    // The all-reduce averages the replicas' weight gradients: each row's share is d / replicas.
    for (std::size_t i = 0; i < d.size(); ++i)
      CHECK(d[i] / replicas == doctest::Approx(d_all[at * classes + i]).epsilon(1e-6).scale(1e-6));
  }
  CHECK(step_loss == doctest::Approx(expected_loss).epsilon(1e-6));
  // A full batch without weights needs none.
  b.valid = n;
  b.sample_weights.clear();
  CHECK_FALSE(tf::weighs_rows(b, {}));
}

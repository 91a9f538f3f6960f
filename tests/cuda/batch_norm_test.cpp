// batch_normalization on tf::cuda: the kernels against the CPU layer on the
// same data (statistics, outputs, gradients, moving statistics), and a
// network with batch_norm trained on both devices in one binary, its moving
// statistics and its evaluation (which reads them) included.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <typeflow/cuda.hpp>

#include "device_vectors.hpp"
#include "model_reference.hpp"

namespace {

using namespace cuda_reference;

// make_data()'s 32 features as a (4, 4, 2) image: batch_norm per channel
// over the pixels of every sample, then per feature of a dense.
using normalized_net =
    tf::sequential<tf::input<32>, tf::reshape<4, 4, 2>, tf::dense<8>, tf::batch_normalization<{.momentum = 0.9f}>,
                   tf::relu, tf::flatten, tf::dense<32>, tf::batch_norm, tf::relu, tf::dense<10>>;

struct run {
  std::vector<double> losses;
  double evaluated = 0;
  std::vector<float> parameters;  // the moving statistics among them
};

// samples: the first ones of make_data() (150: a last partial batch of 6,
// whose statistics count those 6 on both devices).
template <class Device>
run train_normalized(int samples = cuda_reference::samples) {
  const toy_data d = make_data();
  auto data = tf::data::from_tensor_slices<tf::shape<32>>(
                  std::vector<float>(d.features.begin(), d.features.begin() + samples * 32),
                  std::vector<std::int32_t>(d.labels.begin(), d.labels.begin() + samples)) |
              tf::data::batch<batch>;
  tf::model<normalized_net, tf::float32, tf::single_device, Device> m(seed);
  m.compile(tf::optimizers::adam{.learning_rate = 0.01f},
            tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  run out;
  out.losses = m.fit(data, {.epochs = 3, .verbose = 0})["loss"];
  out.evaluated = m.evaluate(data).at("loss");
  const auto region = m.parameter_region();
  out.parameters.assign(region.begin(), region.end());
  return out;
}

}  // namespace

TEST_CASE("cuda model: batch_norm trains like the CPU model, its moving statistics and evaluation included") {
  for (const int samples : {cuda_reference::samples, 150}) {  // 150: a last partial batch of 6
    INFO(samples << " samples");
    const run cpu = train_normalized<tf::cpu>(samples);
    const run gpu = train_normalized<tf::cuda>(samples);
    REQUIRE(gpu.losses.size() == cpu.losses.size());
    for (std::size_t e = 0; e < cpu.losses.size(); ++e) {
      INFO("epoch " << e + 1 << ": gpu " << gpu.losses[e] << ", cpu " << cpu.losses[e]);
      CHECK(gpu.losses[e] == doctest::Approx(cpu.losses[e]).epsilon(2e-3));
    }
    CHECK(gpu.evaluated == doctest::Approx(cpu.evaluated).epsilon(2e-3));
    CHECK(gpu.losses.back() < gpu.losses.front());
    const region_distance gap = distance_between(gpu.parameters, cpu.parameters);
    INFO("largest parameter difference " << gap.worst << " of values up to " << gap.largest);
    CHECK(gap.worst < 1e-2 * gap.largest);
  }
}

TEST_CASE("cuda batch_norm kernels: bitwise repeatable, and the moving statistics move") {
  namespace cu = typeflow::backend::cuda;
  constexpr int rows = 1000, n = 40;
  std::vector<float> x(rows * n), dy(rows * n);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.f + 1.f;
    dy[i] = std::cos(0.11f * static_cast<float>(i));
  }
  std::vector<float> gamma(n, 1.5f), beta(n, -0.25f), zeros(n, 0.f), ones(n, 1.f);
  auto x_d = cuda_test::to_device(x), dy_d = cuda_test::to_device(dy), gamma_d = cuda_test::to_device(gamma),
       beta_d = cuda_test::to_device(beta);
  cu::device_buffer scratch(cu::batch_norm_scratch_bytes(rows, n));
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    auto mm = cuda_test::to_device(zeros), mv = cuda_test::to_device(ones);
    cu::device_buffer y(x.size() * 4), dx(x.size() * 4), stats(2 * n * 4), dg(n * 4), db(n * 4);
    auto f = [](const cu::device_buffer& b) { return b.data<float>(); };
    cu::batch_norm_forward_training(f(x_d), f(y), f(gamma_d), f(beta_d), f(mm), f(mv), f(stats), f(stats) + n, rows,
                                    n, 0.9f, 1e-3f, scratch.data(), nullptr);
    cu::batch_norm_backward(f(x_d), f(dy_d), f(dx), f(gamma_d), f(stats), f(stats) + n, f(dg), f(db), rows, n,
                            scratch.data(), nullptr);
    std::vector<float> all = cuda_test::from_device(y, x.size());
    for (const auto* b : {&dx, &dg, &db, &mm, &mv}) {
      const auto part = cuda_test::from_device(*b, b == &dx ? x.size() : n);
      all.insert(all.end(), part.begin(), part.end());
    }
    if (run == 0) {
      first = all;
      // Per feature, y has mean beta and standard deviation gamma (to epsilon's effect).
      double mean = 0;
      for (int r = 0; r < rows; ++r) mean += all[static_cast<std::size_t>(r) * n];
      CHECK(mean / rows == doctest::Approx(-0.25).epsilon(1e-4));
      const auto moving_mean = cuda_test::from_device(mm, n);
      CHECK(moving_mean[0] != 0.f);
    } else {
      CHECK(all == first);
    }
  }
}

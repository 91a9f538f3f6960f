// The accuracy metrics counted on the GPU (backend/cuda/metric_hits.hpp):
// the launcher's count against the CPU metrics' over the same outputs, at a
// vocabulary's width and in a partial batch; and fit's metrics, counted on
// the device, against evaluate's, which reads the outputs on the host.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <typeflow/cuda.hpp>

#include "device_vectors.hpp"
#include "model_reference.hpp"

namespace {

namespace cu = typeflow::backend::cuda;
namespace tf = typeflow;
using cuda_test::to_device;

// Rows of logits from a few levels (ties), ids and dense targets.
struct rows_of {
  std::vector<float> out, targets;
  std::vector<std::int32_t> ids;
};
rows_of make_rows(int rows, int classes, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> level(0, 40), id(0, classes - 1);
  rows_of r;
  r.out.resize(static_cast<std::size_t>(rows) * classes);
  r.targets.resize(r.out.size());
  for (float& x : r.out) x = static_cast<float>(level(gen)) * 0.25f;
  for (float& t : r.targets) t = static_cast<float>(level(gen)) * 0.25f;
  for (int i = 0; i < rows; ++i) r.ids.push_back(id(gen));
  return r;
}

// stride > classes: the outputs' rows that far apart, as a GPU's tied_logits
// head stores them, the padding holding values that would win every argmax.
unsigned long long device_count(tf::hit_count_rule rule, bool sparse, const rows_of& in, int rows, int classes,
                                int valid_samples, int rows_per_sample, int stride = 0) {
  std::vector<float> stored = in.out;
  if (stride > classes) {
    stored.assign(static_cast<std::size_t>(rows) * stride, 1e30f);
    for (int r = 0; r < rows; ++r)
      std::copy_n(in.out.begin() + static_cast<std::ptrdiff_t>(r) * classes, classes,
                  stored.begin() + static_cast<std::ptrdiff_t>(r) * stride);
  }
  const auto out = to_device(stored), targets = to_device(in.targets), ids = to_device(in.ids);
  const auto valid = to_device(std::vector<std::int32_t>{valid_samples});
  cu::device_buffer hits(sizeof(unsigned long long));
  TYPEFLOW_CUDA_CHECK(cudaMemset(hits.data(), 0, sizeof(unsigned long long)));
  cu::count_hits(rule, sparse, out.template data<float>(), sparse ? ids.data() : targets.data(), rows, classes,
                 valid.template data<std::int32_t>(), rows_per_sample, hits.template data<unsigned long long>(),
                 nullptr, stride);
  unsigned long long count = 0;
  TYPEFLOW_CUDA_CHECK(cudaMemcpy(&count, hits.data(), sizeof(count), cudaMemcpyDeviceToHost));
  return count;
}

}  // namespace

TEST_CASE("cuda metric hits: the device's count is the CPU metrics', at a vocabulary's width and in a partial batch") {
  for (int classes : {10, 50257}) {
    const int rows_per_sample = 4, samples = classes > 100 ? 12 : 300, rows = samples * rows_per_sample;
    const rows_of in = make_rows(rows, classes, 3u + static_cast<std::uint32_t>(classes));
    for (int valid : {-1, samples, samples / 3, 0}) {
      CAPTURE(classes);
      CAPTURE(valid);
      const int counted = valid < 0 ? rows : valid * rows_per_sample;
      tf::metrics::sparse_categorical_accuracy sparse;
      sparse.update(in.out.data(), in.ids.data(), counted, classes);
      CHECK(device_count({}, true, in, rows, classes, valid, rows_per_sample) ==
            static_cast<unsigned long long>(sparse.hits));
      tf::metrics::categorical_accuracy dense;
      dense.update(in.out.data(), in.targets.data(), counted, classes);
      CHECK(device_count({}, false, in, rows, classes, valid, rows_per_sample) ==
            static_cast<unsigned long long>(dense.hits));
      tf::metrics::sparse_top_k_categorical_accuracy top{.k = 3};
      top.update(in.out.data(), in.ids.data(), counted, classes);
      CHECK(device_count({tf::hit_rule::top_k, 3}, true, in, rows, classes, valid, rows_per_sample) ==
            static_cast<unsigned long long>(top.hits));
      // Rows padded to a multiple of 64, as a tied_logits head stores them.
      const int stride = (classes + 63) / 64 * 64;
      CHECK(device_count({}, true, in, rows, classes, valid, rows_per_sample, stride) ==
            static_cast<unsigned long long>(sparse.hits));
      CHECK(device_count({}, false, in, rows, classes, valid, rows_per_sample, stride) ==
            static_cast<unsigned long long>(dense.hits));
      CHECK(device_count({tf::hit_rule::top_k, 3}, true, in, rows, classes, valid, rows_per_sample, stride) ==
            static_cast<unsigned long long>(top.hits));
    }
  }
}

TEST_CASE("cuda metric hits: fit's accuracy and top-k, counted on the device, are evaluate's on unchanged weights") {
  using namespace cuda_reference;
  const toy_data d = make_data();
  // 150 samples: 9 batches of 16 and a partial one of 6.
  auto data = [&] { return unweighted_dataset(d); };
  using net = tf::sequential<tf::input<32>, tf::dense<64>, tf::relu, tf::dense<10>>;  // no dropout: same outputs
  tf::model<net, tf::float32, tf::single_device, tf::cuda> gpu(seed);
  gpu.compile(tf::optimizers::sgd{.learning_rate = 0.f}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
              tf::metrics::sparse_categorical_accuracy{}, tf::metrics::sparse_top_k_categorical_accuracy{.k = 3});
  const auto history = gpu.fit(data(), {.epochs = 1, .verbose = 0});
  const auto evaluated = gpu.evaluate(data());
  CHECK(history["sparse_categorical_accuracy"][0] == evaluated.at("sparse_categorical_accuracy"));
  CHECK(history["sparse_top_k_categorical_accuracy"][0] == evaluated.at("sparse_top_k_categorical_accuracy"));
  CHECK(evaluated.at("sparse_top_k_categorical_accuracy") > evaluated.at("sparse_categorical_accuracy"));
}

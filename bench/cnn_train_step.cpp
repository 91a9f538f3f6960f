// Convolutional training steps on the CPU: typeflow's side of bench/compare_pytorch_cnn.sh.
//
//   build/bench/cnn_train_step [--config mnist_cnn|conv|both] [--policy float32|mixed_bfloat16|mixed_float16]
//                              [--min-time S] [benchmark flags...]
//
// mnist_cnn  the MNIST CNN (Keras's mnist_convnet without dropout), batch 128:
//              input (28, 28) -> reshape (28, 28, 1) -> conv2d<32, 3> relu -> max_pooling2d<2>
//              -> conv2d<64, 3> relu -> max_pooling2d<2> -> flatten -> dense<128> relu -> dense<10>
//            225,034 parameters; Adam (lr 1e-3, epsilon 1e-7, Keras's), sparse
//            categorical cross-entropy on logits, random pixels in [0, 1) and
//            random labels in [0, 10).
// conv       that CNN's second convolution alone, batch 128: input (13, 13, 32)
//            -> conv2d<64, 3> -> (11, 11, 64); 18,496 parameters; mean squared
//            error against random float targets shaped like the output, sgd
//            (lr 1e-3). Its step is forward plus the kernel's and bias's
//            gradients: nothing before the layer has parameters, so there is
//            no input gradient to compute.
// Both as bench/pytorch_cnn.py writes them (PyTorch runs them NCHW, its
// default; typeflow is channels-last, Keras's layout). One benchmark
// iteration is one train_on_batch (forward, loss, backward, update) on the
// same batch; items_per_second is images/s. GFLOP/s counts 3 x the forward
// FLOPs of the convolutions and dense layers (multiply-adds x 2; bias, relu,
// pooling, loss and optimizer not counted), the usual estimate that
// bench/train_step_bench.cpp uses too. It is only a convention: a first layer
// has no input gradient, so the conv config really does 2 x its forward FLOPs
// and its achieved rate is 2/3 of the figure shown.
//   mnist_cnn forward: 2 * (26*26*32*3*3*1 + 11*11*64*3*3*32 + 1600*128 + 128*10) = 5,262,080 per image
//   conv      forward: 2 * 11*11*64*3*3*32                                        = 4,460,544 per image
// --policy picks the precision policy (float32 by default; the mixed ones
// run mnist_cnn only, whose output layer computes in float32 as the loss
// requires): under mixed_bfloat16 the convolutions and dense layers run bf16
// products (native where oneDNN has them, backend/cpu/products_16bit.hpp),
// and of_peak is measured against the bf16 peak.
// After the Google Benchmark table, one line per configuration for the
// comparison script:
//   typeflow config=<c> images_per_second=X step_ms=Y peak_rss_mib=Z params=N gflop_per_second=G of_peak=F
//            policy=P
// peak_rss_mib is the process's peak resident memory so far (getrusage), so
// run one configuration per process to read each one's peak. The loss must
// fall over the timed steps (the same batch every step); if it does not, or
// turns NaN, the benchmark reports an error and prints no summary line.
#include <sys/resource.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <benchmark/benchmark.h>

#include <typeflow/typeflow.hpp>

#include "fma_peak.hpp"

namespace tf = typeflow;

namespace {

constexpr int batch_size = 128;
constexpr int warmup_steps = 3;

using mnist_cnn = tf::sequential<tf::input<28, 28>, tf::reshape<28, 28, 1>, tf::conv2d<32, 3>, tf::relu,
                                 tf::max_pooling2d<2>, tf::conv2d<64, 3>, tf::relu, tf::max_pooling2d<2>,
                                 tf::flatten, tf::dense<128>, tf::relu, tf::dense<10, tf::float32>>;
static_assert(mnist_cnn::parameter_count == 225034);
constexpr double mnist_cnn_forward_flops =
    2.0 * (26 * 26 * 32 * 3 * 3 * 1 + 11 * 11 * 64 * 3 * 3 * 32 + 1600 * 128 + 128 * 10);

using one_conv = tf::sequential<tf::input<13, 13, 32>, tf::conv2d<64, 3>>;
static_assert(one_conv::parameter_count == 64 * 3 * 3 * 32 + 64);
static_assert(std::is_same_v<one_conv::output_shape_type, tf::shape<11, 11, 64>>);
constexpr double conv_forward_flops = 2.0 * 11 * 11 * 64 * 3 * 3 * 32;

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// Times train_on_batch on one batch, after a few untimed steps; Fill
// fills the batch's features and labels, Compile compiles the model.
template <class Net, class Policy, class Label, class Fill, class Compile>
void train_step(benchmark::State& state, double forward_flops, Fill fill, Compile compile) {
  using features = tf::data::tensor_value<float, typename Net::input_shape_type>;
  tf::data::batch_of<batch_size, features, Label> batch;
  std::mt19937 rng{7};
  fill(batch, rng);
  batch.valid = batch_size;

  auto model = std::make_unique<tf::model<Net, Policy>>(/*seed=*/1);
  compile(*model);
  double loss = 0;
  for (int i = 0; i < warmup_steps; ++i) loss = model->train_on_batch(batch);  // set-up and first touches
  const double first_loss = loss;
  for (auto _ : state) {
    loss = model->train_on_batch(batch);
    benchmark::DoNotOptimize(loss);
  }

  const double images = static_cast<double>(state.iterations()) * batch_size;
  state.SetItemsProcessed(state.iterations() * batch_size);
  state.counters["GFLOP/s"] = benchmark::Counter(3.0 * forward_flops * images / 1e9, benchmark::Counter::kIsRate);
  state.counters["params"] = static_cast<double>(Net::parameter_count);
  state.counters["peak_rss_mib"] = peak_rss_mib();
  state.counters["loss_after_warmup"] = first_loss;
  state.counters["loss_last"] = loss;
  // The same batch over and over: the loss must fall. A NaN or a rise means
  // the step computes garbage, and then its speed means nothing.
  if (!(loss == loss) || loss > first_loss) state.SkipWithError("the loss did not fall on a repeated batch");
}

template <class Policy>
void mnist_cnn_step(benchmark::State& state) {
  using label = tf::data::tensor_value<std::int32_t, tf::shape<>>;
  train_step<mnist_cnn, Policy, label>(
      state, mnist_cnn_forward_flops,
      [](auto& batch, std::mt19937& rng) {
        std::uniform_real_distribution<float> pixel{0.f, 1.f};
        std::uniform_int_distribution<std::int32_t> cls{0, 9};
        for (auto& x : batch.features) x = pixel(rng);
        for (auto& y : batch.labels) y = cls(rng);
      },
      [](auto& model) {
        model.compile(tf::optimizers::adam{.learning_rate = 1e-3, .epsilon = 1e-7f},
                      tf::losses::sparse_categorical_crossentropy{.from_logits = true});
      });
}

template <class Policy>
void conv_step(benchmark::State& state) {
  using label = tf::data::tensor_value<float, one_conv::output_shape_type>;
  train_step<one_conv, Policy, label>(
      state, conv_forward_flops,
      [](auto& batch, std::mt19937& rng) {
        std::uniform_real_distribution<float> value{0.f, 1.f};
        for (auto& x : batch.features) x = value(rng);
        for (auto& y : batch.labels) y = value(rng);
      },
      [](auto& model) { model.compile(tf::optimizers::sgd{.learning_rate = 1e-3}, tf::losses::mean_squared_error{}); });
}

BENCHMARK_TEMPLATE(mnist_cnn_step, tf::float32_policy)->Name("cnn/mnist_cnn")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(conv_step, tf::float32_policy)->Name("cnn/conv")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(mnist_cnn_step, tf::mixed_bfloat16)
    ->Name("cnn_mixed_bfloat16/mnist_cnn")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(mnist_cnn_step, tf::mixed_float16)
    ->Name("cnn_mixed_float16/mnist_cnn")->Unit(benchmark::kMillisecond)->UseRealTime();


// Prints the table as usual and keeps each configuration's figures.
class summary_reporter : public benchmark::ConsoleReporter {
 public:
  struct figures {
    double images_per_second = 0, step_ms = 0, peak_rss_mib = 0, params = 0, gflops = 0;
  };
  std::map<std::string, figures> results;

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      // "cnn[_<policy>]/<config>/real_time" -> "<config>"
      std::string config = run.benchmark_name();
      config.erase(0, config.find('/') + 1);
      config = config.substr(0, config.find('/'));
      figures f;
      f.step_ms = run.GetAdjustedRealTime();
      const auto counter = [&](const char* key) {
        const auto it = run.counters.find(key);
        return it == run.counters.end() ? 0.0 : static_cast<double>(it->second);
      };
      f.images_per_second = counter("items_per_second");
      f.peak_rss_mib = counter("peak_rss_mib");
      f.params = counter("params");
      f.gflops = counter("GFLOP/s");
      results[config] = f;
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string config = "both", policy = "float32", min_time;
  std::vector<char*> args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--config") == 0 && i + 1 < argc)
      config = argv[++i];
    else if (std::strcmp(argv[i], "--policy") == 0 && i + 1 < argc)
      policy = argv[++i];
    else if (std::strcmp(argv[i], "--min-time") == 0 && i + 1 < argc)
      min_time = argv[++i];
    else
      args.push_back(argv[i]);
  }
  if (config != "mnist_cnn" && config != "conv" && config != "both") {
    std::fprintf(stderr, "cnn_train_step: --config takes mnist_cnn, conv or both; got %s\n", config.c_str());
    return 2;
  }
  if (policy != "float32" && policy != "mixed_bfloat16" && policy != "mixed_float16") {
    std::fprintf(stderr, "cnn_train_step: --policy takes float32, mixed_bfloat16 or mixed_float16; got %s\n",
                 policy.c_str());
    return 2;
  }
  const std::string prefix = policy == "float32" ? "cnn/" : "cnn_" + policy + "/";
  std::string filter =
      "--benchmark_filter=^" + prefix + (config == "both" ? std::string("(mnist_cnn|conv)") : config) + "(/|$)";
  std::string time = "--benchmark_min_time=" + (min_time.empty() ? std::string("3") : min_time);
  args.push_back(filter.data());
  args.push_back(time.data());
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 2;
  const auto& peak = typeflow_bench::machine_fma_peak();
  typeflow_bench::print_fma_peak(peak);
  summary_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  for (const auto& [name, f] : reporter.results)
    std::printf("typeflow config=%s images_per_second=%.1f step_ms=%.3f peak_rss_mib=%.0f params=%.0f "
                "gflop_per_second=%.2f of_peak=%.3f policy=%s\n",
                name.c_str(), f.images_per_second, f.step_ms, f.peak_rss_mib, f.params, f.gflops,
                f.gflops / peak.for_policy(policy), policy.c_str());
  benchmark::Shutdown();
  return 0;
}

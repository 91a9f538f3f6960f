// A GPT's training step on the CPU: typeflow's side of bench/compare_pytorch_gpt.sh.
//
//   build/bench/gpt_train_step [--config small|large|both|gpt2] [--policy float32|mixed_bfloat16|mixed_float16]
//                              [--min-time S] [benchmark flags...]
//
// small: n_layer 4, n_head 4, n_embd 128, block 64, batch 12 (the char_gpt demo's model)
// large: n_layer 6, n_head 6, n_embd 384, block 256, batch 64
// gpt2:  GPT-2 124M (io/hf_gpt2.hpp's network): n_layer 12, n_head 12,
//        n_embd 768, vocabulary 50257, 1024 positions, tanh GELU, the head
//        tied to the token embedding; block 64, batch 4 ("both" leaves it out)
// small and large as bench/pytorch_gpt.py writes them: 65-token vocabulary, learned
// positions, pre-norm blocks (layer_norm eps 1e-5, exact gelu, 4x MLP), an
// untied head with bias, no dropout, activations kept (no recompute), and
// AdamW (lr 1e-3, betas 0.9/0.99, weight decay 0.1) over random tokens.
// One benchmark iteration is one train_on_batch; items_per_second is
// tokens/s. After the Google Benchmark table, one line per configuration
// for the comparison script:
//   typeflow config=small tokens_per_second=X step_ms=Y peak_rss_mib=Z params=N policy=P arena_mib=A
//            gflop_per_second=G of_peak=F
// peak_rss_mib is the process's peak resident memory so far (getrusage), so
// run one configuration per process to read each one's peak; arena_mib is the
// model's compile-time memory plan (memory_plan::total_bytes), to compare
// with it; of_peak is G over the machine's measured FMA peak (bench/fma_peak.hpp,
// printed first; bf16's under mixed_bfloat16). --policy picks the precision
// policy (float32 by default; the tied head's logits stay float32 under
// every policy, as the loss requires).
#include <sys/resource.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <benchmark/benchmark.h>

#include <typeflow/typeflow.hpp>

#include "fma_peak.hpp"

namespace tf = typeflow;

namespace {

constexpr int vocab = 65;

template <int Layers, int Heads, int Width, int Block>
using gpt = tf::sequential<
    tf::typed_input<tf::int32, Block>, tf::embedding<vocab, Width>, tf::positional_embedding<Block>,
    tf::repeat<Layers,
               tf::sequential<tf::residual<tf::layer_normalization<tf::layer_norm_options{.epsilon = 1e-5f}>,
                                           tf::causal_self_attention<Heads>>,
                              tf::residual<tf::layer_normalization<tf::layer_norm_options{.epsilon = 1e-5f}>,
                                           tf::dense<4 * Width>, tf::gelu, tf::dense<Width>>>>,
    tf::layer_normalization<tf::layer_norm_options{.epsilon = 1e-5f}>, tf::dense<vocab, tf::float32>>;

using small_gpt = gpt<4, 4, 128, 64>;
using large_gpt = gpt<6, 6, 384, 256>;
using gpt2_124m = tf::io::hf_gpt2::network<12, 12, 768, 1024, 50257, 64>;

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

template <class Net, int Batch, class Policy = tf::float32_policy>
void train_step(benchmark::State& state) {
  constexpr int block = Net::input_shape_type::template dim<0>;
  constexpr int tokens = tf::model<Net, Policy>::classes;  // the vocabulary
  using ids = tf::data::tensor_value<std::int32_t, tf::shape<block>>;
  tf::data::batch_of<Batch, ids, ids> batch;
  for (std::size_t i = 0; i < batch.features.size(); ++i) {
    batch.features[i] = static_cast<std::int32_t>(tf::random_stream{1, 0}.uniform(i) * tokens);
    batch.labels[i] = static_cast<std::int32_t>(tf::random_stream{2, 0}.uniform(i) * tokens);
  }
  batch.valid = Batch;
  auto model = std::make_unique<tf::model<Net, Policy>>(1);
  model->compile(tf::optimizers::adamw{.learning_rate = 1e-3, .weight_decay = 0.1f, .beta_2 = 0.99f, .epsilon = 1e-8f},
                 tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  for (int i = 0; i < 3; ++i) model->train_on_batch(batch);  // set-up and first touches
  for (auto _ : state) benchmark::DoNotOptimize(model->train_on_batch(batch));
  state.SetItemsProcessed(state.iterations() * Batch * block);
  // 3 x the forward FLOPs (bench/train_step_bench.cpp says why), and that
  // rate over the machine's measured peak for the policy's products.
  const double gflop = 3.0 * static_cast<double>(Net::flops_per_sample) * Batch * state.iterations() / 1e9;
  state.counters["GFLOP/s"] = benchmark::Counter(gflop, benchmark::Counter::kIsRate);
  const double peak = typeflow_bench::machine_fma_peak().for_policy(
      std::is_same_v<Policy, tf::mixed_bfloat16> ? "mixed_bfloat16" : "float32");
  state.counters["of_peak"] = benchmark::Counter(gflop / peak, benchmark::Counter::kIsRate);
  state.counters["params"] = static_cast<double>(Net::parameter_count);
  state.counters["peak_rss_mib"] = peak_rss_mib();
  using plan = tf::memory_plan<typename Net::template under<Policy>, Batch, 2>;
  state.counters["arena_mib"] = static_cast<double>(plan::total_bytes) / 1048576.0;
}

BENCHMARK_TEMPLATE(train_step, small_gpt, 12)->Name("gpt/small")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(train_step, large_gpt, 64)->Name("gpt/large")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(train_step, gpt2_124m, 4)->Name("gpt/gpt2")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(train_step, small_gpt, 12, tf::mixed_bfloat16)
    ->Name("gpt_mixed_bfloat16/small")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(train_step, large_gpt, 64, tf::mixed_bfloat16)
    ->Name("gpt_mixed_bfloat16/large")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(train_step, gpt2_124m, 4, tf::mixed_bfloat16)
    ->Name("gpt_mixed_bfloat16/gpt2")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(train_step, small_gpt, 12, tf::mixed_float16)
    ->Name("gpt_mixed_float16/small")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(train_step, large_gpt, 64, tf::mixed_float16)
    ->Name("gpt_mixed_float16/large")->Unit(benchmark::kMillisecond)->UseRealTime();

// Prints the table as usual and keeps each configuration's figures.
class summary_reporter : public benchmark::ConsoleReporter {
 public:
  struct figures {
    double tokens_per_second = 0, step_ms = 0, peak_rss_mib = 0, params = 0, arena_mib = 0, gflops = 0, of_peak = 0;
  };
  std::map<std::string, figures> results;

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      const std::string name = run.benchmark_name();
      const std::string config = name.find("large") != std::string::npos  ? "large"
                                 : name.find("gpt2") != std::string::npos ? "gpt2"
                                                                          : "small";
      figures f;
      f.step_ms = run.GetAdjustedRealTime();
      const auto counter = [&](const char* key) {
        const auto it = run.counters.find(key);
        return it == run.counters.end() ? 0.0 : static_cast<double>(it->second);
      };
      f.tokens_per_second = counter("items_per_second");
      f.peak_rss_mib = counter("peak_rss_mib");
      f.params = counter("params");
      f.arena_mib = counter("arena_mib");
      f.gflops = counter("GFLOP/s");
      f.of_peak = counter("of_peak");
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
  if (config != "small" && config != "large" && config != "both" && config != "gpt2") {
    std::fprintf(stderr, "gpt_train_step: --config takes small, large, both or gpt2; got %s\n", config.c_str());
    return 2;
  }
  if (policy != "float32" && policy != "mixed_bfloat16" && policy != "mixed_float16") {
    std::fprintf(stderr, "gpt_train_step: --policy takes float32, mixed_bfloat16 or mixed_float16; got %s\n",
                 policy.c_str());
    return 2;
  }
  const std::string prefix = policy == "float32" ? "gpt/" : "gpt_" + policy + "/";
  std::string filter = "--benchmark_filter=^" + prefix + (config == "both" ? std::string("(small|large)") : config);
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
    std::printf("typeflow config=%s tokens_per_second=%.0f step_ms=%.2f peak_rss_mib=%.0f params=%.0f policy=%s "
                "arena_mib=%.0f gflop_per_second=%.1f of_peak=%.3f\n",
                name.c_str(), f.tokens_per_second, f.step_ms, f.peak_rss_mib, f.params, policy.c_str(), f.arena_mib,
                f.gflops, f.of_peak);
  benchmark::Shutdown();
  return 0;
}

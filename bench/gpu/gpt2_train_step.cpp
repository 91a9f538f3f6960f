// GPT-2 124M's training step on one GPU: model<gpt2, mixed_bfloat16,
// single_device, cuda>, one train_on_batch per iteration (the step's graph
// replay, the batch's upload and the wait for its loss) over 16 windows of
// 1024 random tokens, against bench/gpu/torch_gpt2.py (PyTorch eager and
// torch.compile, bf16 autocast, SDPA attention, fused AdamW).
//
//   build/bench/gpt2_train_step [--benchmark_min_time=3]
//
// Model: io/hf_gpt2.hpp's network (12 layers, 12 heads, width 768,
// vocabulary 50257, 1024 positions, tanh GELU, the head tied to the token
// embedding), AdamW (lr 6e-4, betas 0.9 / 0.95, weight decay 0.1, global
// clip norm 1), sparse cross-entropy on logits. Counters: tokens per second;
// MFU, the FLOPs per token 6 N + 12 L T D (N the parameters but the
// positions', as nanoGPT's estimate_mfu counts) against the H100 / H200's
// 989 TFLOP/s of dense bf16; the arena the memory plan allocates, and the
// device memory in use after the steps (cudaMemGetInfo, the whole device).
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include <typeflow/cuda.hpp>

namespace tf = typeflow;
using namespace tf::literals;

namespace {

constexpr int layers = 12, width = 768, context = 1024, vocab = 50257, batch = 16;
using gpt2 = tf::io::hf_gpt2::network<layers, 12, width, context, vocab>;
using model_type = tf::model<gpt2, tf::mixed_bfloat16, tf::single_device, tf::cuda, tf::device_budget<140_GiB>>;
using tokens = tf::data::tensor_value<std::int32_t, tf::shape<context>>;

constexpr double peak_flops = 989e12;  // H100 / H200 SXM, dense bf16
constexpr double flops_per_token =
    6.0 * static_cast<double>(gpt2::parameter_count - static_cast<std::size_t>(context) * width) +
    12.0 * layers * context * width;

void BM_gpt2_train_step(benchmark::State& state) {
  model_type model(1);
  model.compile(tf::optimizers::adamw{.learning_rate = 6e-4f, .weight_decay = 0.1f, .beta_2 = 0.95f,
                                      .global_clipnorm = 1.f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  tf::data::batch_of<batch, tokens, tokens> b;
  const tf::random_stream rng{1, 2};
  for (std::size_t i = 0; i < b.features.size(); ++i) {
    b.features[i] = static_cast<std::int32_t>(rng.uniform(i) * vocab) % vocab;
    b.labels[i] = (b.features[i] + 1) % vocab;
  }
  b.valid = batch;
  for (int i = 0; i < 3; ++i) model.train_on_batch(b);  // capture and warm up
  for (auto _ : state) benchmark::DoNotOptimize(model.train_on_batch(b));
  const double steps = static_cast<double>(state.iterations());
  state.counters["tokens_per_second"] =
      benchmark::Counter(steps * batch * context, benchmark::Counter::kIsRate);
  state.counters["mfu"] = benchmark::Counter(steps * batch * context * flops_per_token / peak_flops,
                                             benchmark::Counter::kIsRate);
  state.counters["arena_GiB"] = static_cast<double>(model.arena_bytes()) / (1 << 30);
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) == cudaSuccess)
    state.counters["device_used_GiB"] = static_cast<double>(total - free) / (1 << 30);
}
BENCHMARK(BM_gpt2_train_step)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (tf::backend::cuda::device_count(&why) == 0) {
    std::printf("gpt2_train_step: no CUDA device (%s); nothing to measure\n", why.c_str());
    return 0;
  }
  std::printf("gpt2_train_step: %zu parameters, %.3g FLOPs per token, batch %d x %d tokens\n", gpt2::parameter_count,
              flops_per_token, batch, context);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

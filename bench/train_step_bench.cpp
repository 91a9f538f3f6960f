// Training-step and gemm throughput on the CPU.
//
//   build/bench/train_step_bench [--benchmark_filter=BM_mlp_train_step] [--benchmark_min_time=3]
//
// BM_mlp_train_step       784-1024-1024-10 relu MLP, Adam, batch 256: one
//                         train_on_batch (forward, loss, backward, update) per
//                         iteration. items_per_second is samples/s.
// BM_mlp_784_512_512_10   the MNIST example's model, batch 128, the same way.
// BM_mlp_train_step_mirrored2    the 256-sample step on mirrored<2> (128 per replica thread).
// BM_mlp_train_step_accumulate4  the 256 samples as 4 micro-batches of 64 under accumulate<4>.
// BM_mlp_train_step_zero1_mirrored2, ..._zero2_mirrored2, ..._zero3_mirrored2
//                         mirrored<2>'s step under zero<1>, zero<2> (each
//                         replica updates its half, reduces each layer's
//                         gradients as backward goes) and zero<3> (and gathers
//                         each layer's weights into its window).
// ..._mixed_bfloat16, ..._mixed_float16  the same steps under a 16-bit policy
//                         (the logits layer stays float32). arena_MiB is the
//                         model's whole arena: weights, gradients, Adam's
//                         slots, activations, workspaces.
// BM_gemm/...             oneDNN's matmul alone, through backend::cpu::matmul,
//                         for the shapes of the big MLP's step; GFLOP/s = 2mnk/s.
//
// "GFLOP/s" counts 3 x the forward FLOPs per sample (forward, input gradient,
// weight gradient), the usual estimate for a training step; the optimizer
// and element-wise work are not counted. "of_peak" is that rate over the
// machine's measured FMA peak (bench/fma_peak.hpp, printed first): float32's,
// or bf16's under mixed_bfloat16 where the CPU has it. bench/compare_pytorch.sh runs the
// same step in PyTorch for a side-by-side figure.
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <benchmark/benchmark.h>

#include <typeflow/backend/cpu/context.hpp>
#include <typeflow/backend/cpu/matmul.hpp>
#include <typeflow/typeflow.hpp>

#include "fma_peak.hpp"

namespace tf = typeflow;

namespace {

// The logits layer computes in float32 under every policy (dense<10, float32>
// is dense<10> under float32), as a mixed policy requires.
using big_mlp = tf::sequential<tf::input<784>, tf::dense<1024>, tf::relu, tf::dense<1024>, tf::relu,
                               tf::dense<10, tf::float32>>;
static_assert(big_mlp::flops_per_sample == 2 * (784 * 1024 + 1024 * 1024 + 1024 * 10));

// The model of examples/mnist_mlp.cpp.
using mnist_mlp = tf::sequential<tf::input<28, 28>, tf::flatten, tf::dense<512>, tf::relu, tf::dense<512>,
                                 tf::relu, tf::dense<10, tf::float32>>;
static_assert(mnist_mlp::flops_per_sample == 2 * (784 * 512 + 512 * 512 + 512 * 10));

constexpr int warmup_steps = 5;

// One step on Batch samples: a plain step, a mirrored<N> step over N shards,
// or K micro-batches of Batch / K under accumulate<K> (one update).
template <class Net, int Batch, class Strategy = tf::single_device, int Accumulate = 1, class Policy = tf::float32>
void train_step(benchmark::State& state) {
  using features = tf::data::tensor_value<float, typename Net::input_shape_type>;
  using label = tf::data::tensor_value<std::int32_t, tf::shape<>>;
  constexpr int micro_batch = Batch / Accumulate;
  tf::data::batch_of<micro_batch, features, label> batch;

  std::mt19937 rng{7};
  std::uniform_real_distribution<float> pixel{0.f, 1.f};
  std::uniform_int_distribution<std::int32_t> cls{0, 9};
  for (auto& x : batch.features) x = pixel(rng);
  for (auto& y : batch.labels) y = cls(rng);
  batch.valid = micro_batch;

  tf::model<Net, Policy, Strategy> model{/*seed=*/1};
  const tf::losses::sparse_categorical_crossentropy loss_function{.from_logits = true};
  if constexpr (Accumulate > 1)
    model.compile(tf::optimizers::accumulate<Accumulate>(tf::optimizers::adam{.learning_rate = 1e-3f}), loss_function);
  else
    model.compile(tf::optimizers::adam{.learning_rate = 1e-3f}, loss_function);

  double loss = 0;
  for (int i = 0; i < warmup_steps * Accumulate; ++i) loss = model.train_on_batch(batch);
  const double first_loss = loss;

  for (auto _ : state) {
    for (int k = 0; k < Accumulate; ++k) loss = model.train_on_batch(batch);
    benchmark::DoNotOptimize(loss);
  }

  const double samples = static_cast<double>(state.iterations()) * Batch;
  state.SetItemsProcessed(state.iterations() * Batch);
  const double gflop = 3.0 * static_cast<double>(Net::flops_per_sample) * samples / 1e9;
  state.counters["GFLOP/s"] = benchmark::Counter(gflop, benchmark::Counter::kIsRate);
  const double peak = typeflow_bench::machine_fma_peak().for_policy(
      std::is_same_v<Policy, tf::mixed_bfloat16> ? "mixed_bfloat16" : "float32");
  state.counters["of_peak"] = benchmark::Counter(gflop / peak, benchmark::Counter::kIsRate);
  // The same batch over and over: the loss must fall. A NaN or a rise means
  // the step computes garbage, and then its speed means nothing.
  state.counters["loss_after_warmup"] = first_loss;
  state.counters["loss_last"] = loss;
  state.counters["arena_MiB"] = static_cast<double>(model.memory().size()) / (1 << 20);
  if (!(loss == loss) || loss > first_loss) state.SkipWithError("the loss did not fall on a repeated batch");
}

void BM_mlp_train_step(benchmark::State& state) { train_step<big_mlp, 256>(state); }
void BM_mlp_784_512_512_10(benchmark::State& state) { train_step<mnist_mlp, 128>(state); }
// The same 784-1024-1024-10 step of 256 samples, under the scale-out strategies.
void BM_mlp_train_step_mirrored2(benchmark::State& state) { train_step<big_mlp, 256, tf::mirrored<2>>(state); }
void BM_mlp_train_step_accumulate4(benchmark::State& state) { train_step<big_mlp, 256, tf::single_device, 4>(state); }
// ZeRO over mirrored<2> (distribute/zero.hpp): each replica keeps half of
// adam's slots (stage 1) and of the mean gradient (stage 2), and updates its
// half; the bar is within 10% of mirrored<2>'s step.
void BM_mlp_train_step_zero1_mirrored2(benchmark::State& state) {
  train_step<big_mlp, 256, tf::zero<1, tf::mirrored<2>>>(state);
}
void BM_mlp_train_step_zero2_mirrored2(benchmark::State& state) {
  train_step<big_mlp, 256, tf::zero<2, tf::mirrored<2>>>(state);
}
void BM_mlp_train_step_zero3_mirrored2(benchmark::State& state) {
  train_step<big_mlp, 256, tf::zero<3, tf::mirrored<2>>>(state);
}

// Mixed precision: 16-bit activations, rounded products (see layers/dense.hpp).
void BM_mlp_train_step_mixed_bfloat16(benchmark::State& state) {
  train_step<big_mlp, 256, tf::single_device, 1, tf::mixed_bfloat16>(state);
}
void BM_mlp_train_step_mixed_float16(benchmark::State& state) {
  train_step<big_mlp, 256, tf::single_device, 1, tf::mixed_float16>(state);
}
void BM_mlp_784_512_512_10_mixed_bfloat16(benchmark::State& state) {
  train_step<mnist_mlp, 128, tf::single_device, 1, tf::mixed_bfloat16>(state);
}
void BM_mlp_784_512_512_10_mixed_float16(benchmark::State& state) {
  train_step<mnist_mlp, 128, tf::single_device, 1, tf::mixed_float16>(state);
}

BENCHMARK(BM_mlp_train_step)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_mlp_train_step_mixed_bfloat16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_mlp_train_step_mixed_float16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_mlp_784_512_512_10)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_mlp_784_512_512_10_mixed_bfloat16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_mlp_784_512_512_10_mixed_float16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_mlp_train_step_mirrored2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_mlp_train_step_accumulate4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_mlp_train_step_zero1_mirrored2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_mlp_train_step_zero2_mirrored2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_mlp_train_step_zero3_mirrored2)->Unit(benchmark::kMillisecond)->UseRealTime();

// oneDNN's matmul alone. Args: m, n, k, transpose_a, transpose_b, relu epilogue
// (with bias). C (m, n) = op(A) (m, k) · op(B) (k, n).
void BM_gemm(benchmark::State& state) {
  const tf::gemm_shape shape{static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                             static_cast<int>(state.range(2)), state.range(3) != 0, state.range(4) != 0};
  const bool with_bias = state.range(5) != 0;
  const auto after = with_bias ? tf::epilogue::relu : tf::epilogue::none;

  const auto m = static_cast<std::size_t>(shape.m), n = static_cast<std::size_t>(shape.n),
             k = static_cast<std::size_t>(shape.k);
  std::mt19937 rng{3};
  std::uniform_real_distribution<float> value{-1.f, 1.f};
  std::vector<float> a(m * k), b(k * n), bias(n), c(m * n);
  for (auto& x : a) x = value(rng);
  for (auto& x : b) x = value(rng);
  for (auto& x : bias) x = value(rng);

  tf::backend::cpu::context ctx;
  tf::backend::cpu::matmul mm{ctx, shape, with_bias, after};
  std::vector<std::byte> scratchpad(mm.scratchpad_bytes());
  mm.bind(a.data(), b.data(), with_bias ? bias.data() : nullptr, c.data(),
          scratchpad.empty() ? nullptr : scratchpad.data());
  for (int i = 0; i < 3; ++i) mm.run();

  for (auto _ : state) {
    mm.run();
    benchmark::ClobberMemory();
  }

  const double gflop = 2.0 * static_cast<double>(m * n * k) * static_cast<double>(state.iterations()) / 1e9;
  state.counters["GFLOP/s"] = benchmark::Counter(gflop, benchmark::Counter::kIsRate);
  state.counters["of_peak"] =
      benchmark::Counter(gflop / typeflow_bench::machine_fma_peak().float32_gflops, benchmark::Counter::kIsRate);
  state.SetLabel(mm.implementation());
}

// The big MLP's step at batch 256, as dense.hpp issues it, plus two variants of
// layer 2's forward product (no epilogue; kernel stored transposed) that show
// what the epilogue and the kernel's layout cost.
BENCHMARK(BM_gemm)
    ->ArgNames({"m", "n", "k", "tA", "tB", "bias_relu"})
    ->Args({256, 1024, 784, 0, 0, 1})     // layer 1 forward: x (256, 784) · W (784, 1024)
    ->Args({256, 1024, 1024, 0, 0, 1})    // layer 2 forward: h (256, 1024) · W (1024, 1024)
    ->Args({256, 1024, 1024, 0, 0, 0})    // the same without bias and relu: what the epilogue costs
    ->Args({256, 1024, 1024, 0, 1, 1})    // the same with W stored (1024 out, 1024 in): what the layout costs
    ->Args({1024, 1024, 256, 1, 0, 0})    // layer 2 weight gradient: h^T (1024, 256) · dy (256, 1024)
    ->Args({784, 1024, 256, 1, 0, 0})     // layer 1 weight gradient: x^T (784, 256) · dy (256, 1024)
    ->Args({256, 1024, 1024, 0, 1, 0})    // layer 2 input gradient: dy (256, 1024) · W^T (1024, 1024)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  const auto& peak = typeflow_bench::machine_fma_peak();
  typeflow_bench::print_fma_peak(peak, stderr);  // stdout may be --benchmark_format=json
  benchmark::AddCustomContext("fma_peak_float32_gflops", std::to_string(peak.float32_gflops));
  benchmark::AddCustomContext("fma_peak_bf16_gflops", std::to_string(peak.bf16_gflops));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

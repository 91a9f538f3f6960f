// causal_self_attention alone, at the two GPT configurations of
// bench/pytorch_gpt.py, on buffers of its own (the way a step_program binds
// it, without a model around it).
//
//   build/bench/attention_bench [--benchmark_filter=step] [--benchmark_min_time=2]
//
// BM_attention_step/<config>        forward + backward; items_per_second is tokens/s
// BM_attention_step_bfloat16/<config> the same computing in bfloat16 (mixed_bfloat16)
// BM_attention_forward/<config>     forward alone
// BM_attention_projections/<config> the layer's two forward matmuls alone
//                                   (forward minus this is the per-head part)
// BM_onednn_batched_heads/<config>  what the per-head forward products would
//                                   cost as two batched oneDNN matmuls over
//                                   strided (B, H, T, hd) views of qkv: the
//                                   full T x T square, no softmax. The label
//                                   names the implementation oneDNN picks.
//
// Configurations: "small" D=128, H=4, T=64, batch 12; "gpt" D=384, H=6,
// T=256, batch 64. "GFLOP/s" counts 3 x flops_per_sample per token sample
// (forward, input and weight gradients), the masked half included.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <benchmark/benchmark.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <typeflow/typeflow.hpp>
#include <typeflow/backend/cpu/attention.hpp>

namespace tf = typeflow;

namespace {

struct release {
  void operator()(void* p) const noexcept { std::free(p); }
};
template <class T = std::byte>
std::unique_ptr<T, release> aligned(std::size_t count) {
  const std::size_t bytes = tf::align_up(sizeof(T) * (count ? count : 1));
  auto* p = static_cast<T*>(std::aligned_alloc(64, bytes));
  std::memset(static_cast<void*>(p), 0, bytes);
  return std::unique_ptr<T, release>(p);
}

// Compute: the layer's compute dtype (bfloat16: mixed_bfloat16's 16-bit
// products, native where the CPU has them).
template <int Batch, int T, int D, int H, class Compute = tf::float32>
struct attention_setup {
  using layer = typename tf::causal_self_attention<H>::template bind<
      tf::shape<T, D>, tf::layer_context<1, void, void, 0, void, false, tf::layer_precision<Compute>>>;
  static constexpr std::size_t size = std::size_t{Batch} * T * D;
  tf::backend::cpu::context context;
  std::unique_ptr<float, release> in = aligned<float>(size), out = aligned<float>(size), d_out = aligned<float>(size),
                                  d_in = aligned<float>(size), params = aligned<float>(layer::params::floats),
                                  grads = aligned<float>(layer::params::floats);
  std::unique_ptr<std::byte, release> workspace =
                                          aligned(Batch * layer::workspace_bytes_per_sample + layer::workspace_bytes_per_step),
                                      scratch = aligned(Batch * layer::scratch_bytes_per_sample + layer::scratch_bytes_per_step);
  tf::run_state run{.training = true, .seed = 1, .step = 1};
  tf::executor<tf::causal_self_attention<H>, layer, Batch, tf::cpu> executor;
  std::unique_ptr<std::byte, release> scratchpad;

  attention_setup() : executor(io()) {
    for (std::size_t i = 0; i < size; ++i) {
      in.get()[i] = tf::random_stream{1, 0}.uniform(i) - 0.5f;
      d_out.get()[i] = 1e-3f * (tf::random_stream{2, 0}.uniform(i) - 0.5f);
    }
    for (std::size_t i = 0; i < layer::params::floats; ++i)
      params.get()[i] = 0.1f * (tf::random_stream{3, 0}.uniform(i) - 0.5f);
    scratchpad = aligned(executor.scratchpad_bytes());
    executor.bind(scratchpad.get());
  }
  tf::layer_io<tf::cpu> io() {
    tf::layer_io<tf::cpu> io;
    io.in = in.get();
    io.out = out.get();
    io.d_in = d_in.get();
    io.d_out = d_out.get();
    io.params = params.get();
    io.grads = grads.get();
    io.workspace = workspace.get();
    io.scratch = scratch.get();
    io.context = &context;
    io.run = &run;
    return io;
  }
};

template <int Batch, int T, int D, int H>
void report(benchmark::State& state) {
  using layer = typename attention_setup<Batch, T, D, H>::layer;
  const double tokens = static_cast<double>(state.iterations()) * Batch * T;
  state.SetItemsProcessed(static_cast<std::int64_t>(tokens));
  state.counters["GFLOP/s"] = benchmark::Counter(
      3.0 * static_cast<double>(layer::flops_per_sample) * state.iterations() * Batch / 1e9, benchmark::Counter::kIsRate);
}

template <int Batch, int T, int D, int H, class Compute = tf::float32>
void BM_attention_step(benchmark::State& state) {
  auto setup = std::make_unique<attention_setup<Batch, T, D, H, Compute>>();
  for (int i = 0; i < 2; ++i) {
    setup->executor.forward();
    setup->executor.backward();
  }
  for (auto _ : state) {
    setup->executor.forward();
    setup->executor.backward();
    benchmark::ClobberMemory();
  }
  report<Batch, T, D, H>(state);
  state.SetLabel(setup->executor.implementations());
}

// The same under mixed_bfloat16: projections and per-head products in bf16.
template <int Batch, int T, int D, int H>
void BM_attention_step_bfloat16(benchmark::State& state) {
  BM_attention_step<Batch, T, D, H, tf::bfloat16>(state);
}

template <int Batch, int T, int D, int H>
void BM_attention_forward(benchmark::State& state) {
  auto setup = std::make_unique<attention_setup<Batch, T, D, H>>();
  setup->executor.forward();
  for (auto _ : state) {
    setup->executor.forward();
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * Batch * T);
}

template <int Batch, int T, int D, int H>
void BM_attention_projections(benchmark::State& state) {
  tf::backend::cpu::context context;
  constexpr int rows = Batch * T;
  const int qkv_stride = static_cast<int>(tf::padded_row_length(3 * D));
  const int proj_stride = static_cast<int>(tf::padded_row_length(D));
  tf::backend::cpu::matmul qkv(context, {rows, 3 * D, D, false, false, 0, qkv_stride}, true);
  tf::backend::cpu::matmul proj(context, {rows, D, D, false, false, 0, proj_stride}, true);
  auto x = aligned<float>(std::size_t{rows} * D), w1 = aligned<float>(std::size_t{D} * qkv_stride),
       b1 = aligned<float>(3 * D), y1 = aligned<float>(std::size_t{rows} * 3 * D),
       w2 = aligned<float>(std::size_t{D} * proj_stride), b2 = aligned<float>(D), y2 = aligned<float>(std::size_t{rows} * D);
  auto pad = aligned(std::max(qkv.scratchpad_bytes(), proj.scratchpad_bytes()));
  qkv.bind(x.get(), w1.get(), b1.get(), y1.get(), pad.get());
  proj.bind(x.get(), w2.get(), b2.get(), y2.get(), pad.get());
  for (auto _ : state) {
    qkv.run();
    proj.run();
  }
  state.SetItemsProcessed(state.iterations() * rows);
  state.SetLabel(std::string(qkv.implementation()));
}

template <int Batch, int T, int D, int H>
void BM_onednn_batched_heads(benchmark::State& state) {
  using dt = dnnl::memory::data_type;
  using desc = dnnl::memory::desc;
  const dnnl::memory::dim B = Batch, h = H, t = T, hd = D / H, width = D;
  tf::backend::cpu::context context;
  // q, k and v as (B, H, T, hd) views of qkv (B, T, 3D); k transposed.
  const desc q_md({B, h, t, hd}, dt::f32, {t * 3 * width, hd, 3 * width, 1});
  const desc kt_md({B, h, hd, t}, dt::f32, {t * 3 * width, hd, 1, 3 * width});
  const desc s_md({B, h, t, t}, dt::f32, {h * t * t, t * t, t, 1});
  const desc y_md({B, h, t, hd}, dt::f32, {t * width, hd, width, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::matmul::primitive_desc scores_pd(dnnl::matmul::desc(q_md, kt_md, s_md), attr, context.engine);
  const dnnl::matmul::primitive_desc values_pd(dnnl::matmul::desc(s_md, q_md, y_md), attr, context.engine);
  const dnnl::matmul scores(scores_pd), values(values_pd);
  auto qkv = aligned<float>(static_cast<std::size_t>(B * t * 3 * width));
  auto s = aligned<float>(static_cast<std::size_t>(B * h * t * t));
  auto y = aligned<float>(static_cast<std::size_t>(B * t * width));
  auto pad = aligned(std::max(scores_pd.scratchpad_desc().get_size(), values_pd.scratchpad_desc().get_size()));
  auto memory = [&](const desc& md, float* p) { return dnnl::memory(md, context.engine, p); };
  const dnnl::memory pad_memory(scores_pd.scratchpad_desc(), context.engine, pad.get());
  std::unordered_map<int, dnnl::memory> scores_args{{DNNL_ARG_SRC, memory(q_md, qkv.get())},
                                                    {DNNL_ARG_WEIGHTS, memory(kt_md, qkv.get() + width)},
                                                    {DNNL_ARG_DST, memory(s_md, s.get())},
                                                    {DNNL_ARG_SCRATCHPAD, pad_memory}};
  std::unordered_map<int, dnnl::memory> values_args{{DNNL_ARG_SRC, memory(s_md, s.get())},
                                                    {DNNL_ARG_WEIGHTS, memory(q_md, qkv.get() + 2 * width)},
                                                    {DNNL_ARG_DST, memory(y_md, y.get())},
                                                    {DNNL_ARG_SCRATCHPAD, pad_memory}};
  for (auto _ : state) {
    scores.execute(context.stream, scores_args);
    values.execute(context.stream, values_args);
    context.stream.wait();
  }
  state.SetItemsProcessed(state.iterations() * Batch * T);
  state.SetLabel(std::string(scores_pd.impl_info_str()) + " / " + values_pd.impl_info_str());
}

}  // namespace

#define TYPEFLOW_ATTENTION_BENCH(name)                                            \
  BENCHMARK_TEMPLATE(name, 12, 64, 128, 4)->Name(#name "/small")->Unit(benchmark::kMillisecond); \
  BENCHMARK_TEMPLATE(name, 64, 256, 384, 6)->Name(#name "/gpt")->Unit(benchmark::kMillisecond)

TYPEFLOW_ATTENTION_BENCH(BM_attention_step);
TYPEFLOW_ATTENTION_BENCH(BM_attention_step_bfloat16);
TYPEFLOW_ATTENTION_BENCH(BM_attention_forward);
TYPEFLOW_ATTENTION_BENCH(BM_attention_projections);
TYPEFLOW_ATTENTION_BENCH(BM_onednn_batched_heads);

BENCHMARK_MAIN();

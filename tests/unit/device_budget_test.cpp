// device_budget<Bytes> (train/device_budget.hpp): a model whose memory plan
// fits trains; one whose plan fits only without the optimizer's slots is
// refused by fit and train_on_batch before the first step, naming both
// numbers. (A plan over the budget at compile time: compile_fail/
// device_budget_exceeded.cpp.)
#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <typeflow/typeflow.hpp>

#include "../support/tiny_gpt.hpp"

namespace {
namespace tf = typeflow;
using namespace tf::literals;

using mlp = tf::sequential<tf::input<16>, tf::dense<32>, tf::relu, tf::dense<4>>;
using plan8 = tf::memory_plan<tf::model<mlp>::bound_network, 8, 0>;
// Room for the plan and one slot, not two (adam keeps m and v).
constexpr std::uint64_t one_slot_budget = plan8::total_bytes + plan8::trainable_bytes;

auto data() {
  std::vector<float> x(64 * 16);
  std::vector<std::int32_t> y(64);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7) % 13) / 13.f - 0.5f;
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int32_t>(i % 4);
  return tf::data::from_tensor_slices<tf::shape<16>>(x, y) | tf::data::batch<8>;
}
}  // namespace

TEST_CASE("device_budget: the units, and a plan that fits trains as without a budget") {
  static_assert(80_GiB == 80 * tf::GiB && 80 * tf::GiB == 85899345920ull && 512_MiB == tf::GiB / 2);
  tf::model<mlp, tf::float32, tf::single_device, tf::cpu, tf::device_budget<1_GiB>> budgeted(3);
  tf::model<mlp> plain(3);
  budgeted.compile(tf::optimizers::adam{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  plain.compile(tf::optimizers::adam{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  const auto a = budgeted.fit(data(), {.epochs = 2, .verbose = 0});
  const auto b = plain.fit(data(), {.epochs = 2, .verbose = 0});
  CHECK(a["loss"] == b["loss"]);
}

TEST_CASE("device_budget: the optimizer's slots are counted before the first step") {
  tf::model<mlp, tf::float32, tf::single_device, tf::cpu, tf::device_budget<one_slot_budget>> model(3);
  const std::vector<float> before(model.parameter_region().begin(), model.parameter_region().end());

  model.compile(tf::optimizers::adam{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  try {
    model.fit(data(), {.epochs = 1, .verbose = 0});
    FAIL("fit with two slots over the budget did not throw");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("fit: the memory plan for this batch size needs " +
                    std::to_string(plan8::total_bytes + 2 * plan8::trainable_bytes) + " bytes") != std::string::npos);
    CHECK(what.find("device_budget is " + std::to_string(one_slot_budget) + " bytes") != std::string::npos);
    // Each part, and which is the largest.
    CHECK(what.find("(parameters " + std::to_string(plan8::parameter_bytes) + ", gradients " +
                    std::to_string(plan8::trainable_bytes) + ", optimizer slots " +
                    std::to_string(2 * plan8::trainable_bytes) + ", activations ") != std::string::npos);
    CHECK(what.find("; the largest: optimizer slots)") != std::string::npos);
  }
  tf::data::batch_of<8, tf::data::tensor_value<float, tf::shape<16>>, tf::data::tensor_value<std::int32_t, tf::shape<>>>
      batch{};
  CHECK_THROWS_AS(model.train_on_batch(batch), std::invalid_argument);
  CHECK(model.iterations() == 0);
  const auto after = model.parameter_region();
  CHECK(std::equal(before.begin(), before.end(), after.begin()));

  // One slot fits: momentum-free sgd keeps none, rmsprop one.
  model.compile(tf::optimizers::rmsprop{}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  model.fit(data(), {.epochs = 1, .verbose = 0});
  CHECK(model.iterations() == 8);
  CHECK(model.evaluate(data()).at("loss") > 0);
}

namespace {
// tiny_gpt's causal_self_attention over (T, D) bound for the CPU and for tf::cuda
// (contract/layer.hpp's layer_context, Gpu), under mixed_bfloat16.
constexpr int T = 64, D = 32, H = 2;  // tiny_gpt's attention has two heads
template <bool Gpu>
using attention_on = tf::causal_self_attention<H>::bind<
    tf::shape<T, D>, tf::layer_context<1, void, void, 0, void, false, tf::layer_precision<tf::bfloat16>, Gpu>>;
template <bool Gpu>
using dense_on = tf::dense<4 * D>::bind<
    tf::shape<T, D>, tf::layer_context<2, void, void, 0, void, false, tf::layer_precision<tf::bfloat16>, Gpu>>;
using toy = tf::testing::tiny_gpt<T, D, 50>;
using lm = toy::net<tf::repeat<2, toy::block>>;
template <bool Gpu>
using lm_plan = tf::memory_plan<lm::under<tf::mixed_bfloat16, Gpu>, 4, 2>;
}  // namespace

TEST_CASE("a network bound for tf::cuda plans what the GPU's executors keep: no (T, T) scores, no host copies or scratch, and gradient buffers as large as their outputs") {
  using cpu = attention_on<false>;
  using gpu = attention_on<true>;
  // The GPU's attention keeps qkv, y and two statistics a row and head; the
  // CPU's also the probabilities P (T rows of a padded T per head).
  static_assert(gpu::workspace_bytes_per_sample == cpu::qkv_bytes + cpu::concat_bytes + cpu::statistics_bytes);
  static_assert(cpu::workspace_bytes_per_sample >= gpu::workspace_bytes_per_sample + cpu::probability_bytes);
  static_assert(cpu::probability_bytes == sizeof(float) * H * T * tf::padded_row_length(T));
  static_assert(gpu::scratch_bytes_per_sample == 0 && gpu::scratch_bytes_per_step == 0);
  static_assert(cpu::scratch_bytes_per_sample > 0 && cpu::scratch_bytes_per_step > 0);
  // dense under bfloat16: the CPU's rounded operands (scratch) and its native
  // path's bf16 kernel and input copies (workspace); none on the GPU.
  using dense_cpu = dense_on<false>;
  using dense_gpu = dense_on<true>;
  static_assert(dense_cpu::scratch_bytes_per_sample > 0 && dense_cpu::workspace_bytes_per_step > 0);
  static_assert(dense_gpu::scratch_bytes_per_sample == 0 && dense_gpu::scratch_bytes_per_step == 0);
  static_assert(dense_gpu::workspace_bytes_per_sample == 0 && dense_gpu::workspace_bytes_per_step == 0);
  // The whole language model: the same parameters at the same offsets, the
  // same activations but the logits, whose rows the GPU pads from 50 to 64
  // columns and stores in bf16 (its loss reads them so); two attention
  // layers' P fewer, and tied_logits' and attention's host operands gone
  // from the scratch.
  using on_cpu = lm_plan<false>;
  using on_gpu = lm_plan<true>;
  static_assert(on_gpu::parameter_bytes == on_cpu::parameter_bytes && on_gpu::slots_offset == on_cpu::slots_offset);
  static_assert(on_gpu::layer_parameter_offset == on_cpu::layer_parameter_offset);
  static_assert(lm::under<tf::mixed_bfloat16, true>::output_row_stride == 64 &&
                lm::under<tf::mixed_bfloat16, false>::output_row_stride == 50);
  constexpr std::size_t cpu_logits = tf::align_up(4 * T * 50 * sizeof(float));
  constexpr std::size_t gpu_logits = tf::align_up(4 * T * 64 * sizeof(tf::bf16));
  static_assert(lm::under<tf::mixed_bfloat16, true>::bf16_logits && !lm::under<tf::mixed_bfloat16, false>::bf16_logits);
  static_assert(!lm::under<tf::mixed_float16, true>::bf16_logits && !lm::under<tf::float32_policy, true>::bf16_logits);
  static_assert(on_gpu::activation_bytes == on_cpu::activation_bytes - cpu_logits + gpu_logits);
  // The CPU's loss writes d_logits into gradient buffer 0; the GPU's over
  // the logits themselves, so that its buffers hold (T, D) gradients only.
  constexpr std::size_t last = on_gpu::layer_count - 1;
  static_assert(on_cpu::gradient_buffer_sizes[0] == cpu_logits &&
                on_cpu::output_gradient_offset(last) == on_cpu::gradient_buffer_offset[0]);
  static_assert(on_gpu::output_gradient_offset(last) == on_gpu::activation_offset[last]);
  static_assert(on_gpu::gradient_buffer_sizes[0] == tf::align_up(4 * T * D * sizeof(float)) &&
                on_gpu::gradient_buffer_sizes[1] == tf::align_up(4 * T * D * sizeof(float)));
  static_assert(on_cpu::workspace_total_bytes >= on_gpu::workspace_total_bytes + 2 * 4 * cpu::probability_bytes);
  static_assert(on_gpu::scratch_bytes < on_cpu::scratch_bytes);
  // On both devices the two gradient buffers are each as large as the
  // largest output whose gradient they hold: the logits' only buffer 0 (the
  // loss writes there), the model's (T, D) outputs buffer 1.
  using wide = tf::memory_plan<tf::testing::tiny_gpt<T, D, 500>::net<tf::repeat<2, toy::block>>, 4, 0>;
  static_assert(wide::gradient_buffer_sizes[0] == tf::align_up(4 * T * 500 * sizeof(float)));
  static_assert(wide::gradient_buffer_sizes[1] == tf::align_up(4 * T * D * sizeof(float)));
  MESSAGE("tiny GPT (T 64, D 32, 2 blocks, batch 4, adam) planned for the CPU: " << on_cpu::total_bytes
          << " bytes; for tf::cuda: " << on_gpu::total_bytes);
  CHECK(on_gpu::total_bytes < on_cpu::total_bytes);
}

TEST_CASE("on tf::cuda a dense fuses the gelu_tanh after it: the product kept in its workspace, the plan's bytes the same") {
  using mlp_block = tf::sequential<tf::input<T, D>, tf::dense<4 * D>, tf::gelu_tanh, tf::dense<D>, tf::gelu_tanh,
                                   tf::dense<D - 4>, tf::gelu_tanh, tf::dense<D>, tf::gelu>;
  using cpu = mlp_block::under<tf::float32_policy, false>;
  using gpu = mlp_block::under<tf::float32_policy, true>;
  // The CPU fuses no GELU; the GPU fuses gelu_tanh after a dense of a width
  // that cuBLASLt's aux rows need no padding for (a multiple of 8), never the
  // exact gelu (cuBLASLt's epilogue is the tanh form).
  static_assert(cpu::layer<1>::fused == tf::epilogue::none && !cpu::layer<2>::fused);
  static_assert(gpu::layer<1>::fused == tf::epilogue::gelu_tanh && gpu::layer<2>::fused &&
                gpu::layer<2>::output_aliases_input);
  static_assert(gpu::layer<3>::fused == tf::epilogue::gelu_tanh && gpu::layer<4>::fused);
  static_assert(gpu::layer<5>::fused == tf::epilogue::none && !gpu::layer<6>::fused);  // 28 wide
  static_assert(gpu::layer<7>::fused == tf::epilogue::none && !gpu::layer<8>::fused);  // exact gelu
  // The product (the dense's output as stored: float32 here, bf16 under
  // mixed_bfloat16) moves from the activation's input to the dense's
  // workspace, and the activation's output is the dense's.
  static_assert(gpu::layer<1>::workspace_bytes_per_sample == T * 4 * D * 4 &&
                cpu::layer<1>::workspace_bytes_per_sample == 0);
  static_assert(mlp_block::under<tf::mixed_bfloat16, true>::layer<1>::workspace_bytes_per_sample == T * 4 * D * 2);
  static_assert(gpu::layer<5>::workspace_bytes_per_sample == 0);
  using cpu_plan = tf::memory_plan<cpu, 4, 0>;
  using gpu_plan = tf::memory_plan<gpu, 4, 0>;
  static_assert(gpu_plan::activation_offset[2] == gpu_plan::activation_offset[1]);
  static_assert(cpu_plan::activation_offset[2] != cpu_plan::activation_offset[1]);
  constexpr std::size_t moved = tf::align_up(4 * T * 4 * D * 4) + tf::align_up(4 * T * D * 4);
  static_assert(gpu_plan::activation_bytes + moved == cpu_plan::activation_bytes);
  static_assert(gpu_plan::workspace_total_bytes == cpu_plan::workspace_total_bytes + moved);
  // Inside recompute<...> the workspaces are recomputed with the activations.
  using deep = tf::sequential<tf::input<T, D>, tf::recompute<tf::dense<4 * D>, tf::gelu_tanh, tf::dense<D>>>;
  using deep_gpu = tf::memory_plan<deep::under<tf::float32_policy, true>, 4, 0>;
  using deep_cpu = tf::memory_plan<deep::under<tf::float32_policy, false>, 4, 0>;
  static_assert(deep_gpu::workspace_total_bytes == deep_cpu::workspace_total_bytes);
  CHECK(gpu_plan::activation_bytes < cpu_plan::activation_bytes);
}

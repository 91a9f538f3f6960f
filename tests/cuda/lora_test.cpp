// lora<Rank, Alpha> on tf::cuda (backend/cuda/lora.hpp, in dense's and
// attention's executors): a GPT whose attention and MLP projections carry
// adapters, trained on both devices from the same seed and batches, under
// float32 and mixed_bfloat16. The frozen kernels must stay as they are on
// the GPU too, or the losses part from the CPU's within a few steps.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include <typeflow/cuda.hpp>

#include "../support/tiny_gpt.hpp"
#include "compare_losses.hpp"

namespace {

namespace tf = typeflow;

template <class Attention, class Up, class Down>
using gpt_block = tf::sequential<tf::residual<tf::layer_norm, Attention>, tf::residual<tf::layer_norm, Up, tf::gelu, Down>>;
using lora_block =
    gpt_block<tf::causal_self_attention<2, tf::lora<4, 8>>, tf::dense<64, tf::lora<4, 8>>, tf::dense<32, tf::lora<2>>>;
using lora_gpt = tf::sequential<tf::typed_input<tf::int32, 16>, tf::embedding<20, 32>, tf::positional_embedding<16>,
                                tf::repeat<2, lora_block>, tf::layer_norm, tf::dense<20, tf::float32>>;
using batches = tf::testing::tiny_gpt<16, 32, 20>;

template <class Policy, class Device>
std::vector<double> lora_losses() {
  tf::model<lora_gpt, Policy, tf::single_device, Device> model(5);
  model.compile(tf::optimizers::adam{.learning_rate = 1e-2f},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true});
  std::vector<double> out;
  for (int step = 0; step < 25; ++step) out.push_back(model.train_on_batch(batches::token_batch(11 + step % 5)));
  return out;
}

template <class Policy>
void compare(double tolerance) {  // the last step's loss below the first's: the adapters learn
  const auto gpu = lora_losses<Policy, tf::cuda>();
  cuda_test::check_losses_agree(gpu, lora_losses<Policy, tf::cpu>(), tolerance, gpu.size() - 1);
}

}  // namespace

TEST_CASE("cuda model: LoRA adapters on attention and dense train like the CPU's, float32 and mixed_bfloat16") {
  compare<tf::float32>(2e-3);
  compare<tf::mixed_bfloat16>(3e-2);
}

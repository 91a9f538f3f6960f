// The mixed-precision models the CUDA tests train on both devices, and their
// CPU side (mixed_reference.cpp, compiled by g++ as model_reference.cpp is:
// nvcc cannot compile oneDNN's C++ header). The data are model_reference's.
#pragma once

#include <cstdint>
#include <vector>

#include <typeflow/typeflow.hpp>

#include "model_reference.hpp"

namespace cuda_mixed_reference {

namespace tf = typeflow;
using cuda_reference::batch;
using cuda_reference::make_data;
using cuda_reference::samples;
using cuda_reference::seed;
using cuda_reference::toy_data;

// Every path of the CUDA dense under a mixed policy: dense<64> converts its
// float32 input and stores 16 bits (fused relu); dropout on 16 bits;
// dense<48> reads 16 bits in place and, before layer_norm, stores float32
// (fused tanh, rounded); dense<40> converts layer_norm's float32 output;
// gelu on 16 bits; dense<24> stores 16 bits with gelu_tanh in its epilogue
// (the product kept in its workspace); dense<10, float32> converts its 16-bit
// input to float32.
using mlp = tf::sequential<tf::input<32>, tf::dense<64>, tf::relu, tf::dropout<0.25f>, tf::dense<48>, tf::tanh,
                           tf::layer_norm, tf::dense<40>, tf::gelu, tf::dense<24>, tf::gelu_tanh,
                           tf::dense<10, tf::float32>>;

struct run_result {
  std::vector<double> losses;      // the loss after each epoch
  std::vector<double> accuracies;  // sparse_categorical_accuracy after each epoch
  std::vector<float> parameters;   // the parameter region after training
  std::int64_t iterations = 0;
  std::int64_t skipped_steps = 0;
  float loss_scale = 1.f;
};

// Trains `mlp` under the policy with Adam for `epochs` epochs over
// make_data() (no shuffle), as model_reference's train_on_cpu does.
run_result train_bfloat16_on_cpu(int epochs);
run_result train_float16_on_cpu(int epochs);
run_result train_float32_on_cpu(int epochs);  // the same mlp in float32, for scale

// A float16 overflow: input (1, 1, 0, ..., 0), an identity 16-bit dense<8>,
// then a float32 dense<2> whose kernel rows are (8, -8), (-8, 8), then 0.
// The logits are 0, d(loss)/d(logits) is (0.5, -0.5) times the loss scale s,
// and the 16-bit dense receives d_in = (8 s, -8 s, 0, ...): infinite in
// float16 while 8 s >= 65520, so with the default dynamic scale the steps at
// 2^15, 2^14 and 2^13 are skipped and the one at 2^12 applies. (Widths of 8
// keep the 16-bit products' rows 16 bytes long, as cuBLASLt likes them.)
using overflow_net = tf::sequential<tf::input<8>, tf::dense<8>, tf::dense<2, tf::float32>>;
using overflow_batch = tf::data::batch_of<1, tf::data::tensor_value<float, tf::shape<8>>,
                                          tf::data::tensor_value<std::int32_t, tf::shape<>>>;
overflow_batch make_overflow_batch();

// Sets the weights above on a model of overflow_net (on either device).
template <class Model>
void set_overflow_weights(Model& model) {
  auto k1 = model.parameter("layers.1.kernel");
  auto b1 = model.parameter("layers.1.bias");
  auto k2 = model.parameter("layers.2.kernel");
  auto b2 = model.parameter("layers.2.bias");
  for (std::size_t i = 0; i < 8; ++i) {
    for (std::size_t j = 0; j < 8; ++j) k1[i * 8 + j] = i == j ? 1.f : 0.f;
    for (std::size_t j = 0; j < 2; ++j) k2[i * 2 + j] = i < 2 ? (i == j ? 8.f : -8.f) : 0.f;
    b1[i] = 0.f;
  }
  b2[0] = b2[1] = 0.f;
}

// What the model reports after each train_on_batch of the overflow batch.
struct overflow_trace {
  std::vector<std::int64_t> skipped_steps, iterations;
  std::vector<float> loss_scales;
  std::vector<float> parameters_before, parameters_after;  // around the whole run
};
overflow_trace overflow_on_cpu(int steps);

}  // namespace cuda_mixed_reference

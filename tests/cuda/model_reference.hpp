// The model the CUDA model test trains on both devices, and the CPU side of
// the comparison. The CPU half (model_reference.cpp) is compiled by g++ into
// the CUDA test binary: nvcc cannot compile oneDNN's C++ header (see
// backend/cpu/context.hpp), so CPU models run from .cpp files.
#pragma once

#include <cstdint>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace cuda_reference {

namespace tf = typeflow;

using mlp = tf::sequential<tf::input<32>, tf::dense<64>, tf::relu, tf::dropout<0.25f>, tf::layer_norm, tf::dense<48>,
                           tf::tanh, tf::dense<40>, tf::gelu, tf::dense<10>>;
constexpr int batch = 16;
constexpr int samples = 160;  // 10 steps an epoch
constexpr std::uint64_t seed = 7;

struct toy_data {
  std::vector<float> features;
  std::vector<std::int32_t> labels;
};
toy_data make_data();

struct run_result {
  std::vector<double> losses;          // the loss after each epoch
  std::vector<double> accuracies;      // sparse_categorical_accuracy after each epoch
  std::vector<float> parameters;       // the parameter region after training
};

// Trains `mlp` with Adam for `epochs` epochs over make_data() (no shuffle).
run_result train_on_cpu(int epochs);

}  // namespace cuda_reference

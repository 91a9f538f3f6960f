// The model the CUDA model test trains on both devices, and the CPU side of
// the comparison. The CPU half (model_reference.cpp) is compiled by g++ into
// the CUDA test binary: nvcc cannot compile oneDNN's C++ header (see
// backend/cpu/context.hpp), so CPU models run from .cpp files.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace cuda_reference {

namespace tf = typeflow;

// On the GPU relu, tanh and gelu_tanh run in their dense's epilogue.
using mlp = tf::sequential<tf::input<32>, tf::dense<64>, tf::relu, tf::dropout<0.25f>, tf::layer_norm, tf::dense<48>,
                           tf::tanh, tf::dense<40>, tf::gelu, tf::dense<24>, tf::gelu_tanh, tf::dense<10>>;
// A functional graph with every kind of wiring: two branches from the input,
// a concatenation, a skip add, a product, an in-place layer_norm, a shared
// dense applied twice, a maximum and the input read twice.
using graph_net = tf::functional<tf::input<32>,                                      //
                                 tf::node<"a", tf::dense<64>, "input">,                //
                                 tf::node<"ar", tf::relu, "a">,                        //
                                 tf::node<"b", tf::dense<64>, "input">,                //
                                 tf::node<"bt", tf::tanh, "b">,                        //
                                 tf::node<"cat", tf::concatenate<>, "ar", "bt">,       //
                                 tf::node<"h", tf::dense<64>, "cat">,                  //
                                 tf::node<"s", tf::add, "h", "ar">,                    //
                                 tf::node<"m", tf::multiply, "s", "bt">,               //
                                 tf::node<"ln", tf::layer_norm, "m">,                  //
                                 tf::node<"cat2", tf::concatenate<>, "ln", "ar">,      //
                                 tf::node<"again", tf::shared<"h">, "cat2">,           //
                                 tf::node<"mx", tf::maximum, "again", "ln">,           //
                                 tf::node<"logits", tf::dense<10>, "mx">>;
// Two named inputs (each half of a sample's 32 features) through one
// shared dense, concatenated: the input nodes' unpacking on the device.
using two_input_net = tf::functional<tf::node<"left", tf::input<16>>,              //
                                     tf::node<"right", tf::input<16>>,             //
                                     tf::node<"l", tf::dense<32>, "left">,         //
                                     tf::node<"lr", tf::relu, "l">,                //
                                     tf::node<"r", tf::shared<"l">, "right">,      //
                                     tf::node<"rt", tf::tanh, "r">,                //
                                     tf::node<"cat", tf::concatenate<>, "lr", "rt">,  //
                                     tf::node<"logits", tf::dense<10>, "cat">>;
constexpr int batch = 16;
constexpr int samples = 160;  // 10 steps an epoch
constexpr std::uint64_t seed = 7;

struct toy_data {
  std::vector<float> features;
  std::vector<std::int32_t> labels;
};
toy_data make_data();

// make_data()'s samples as examples of named parts: left and right halves.
using halves = tf::data::record<tf::data::part<"left", tf::data::tensor_value<float, tf::shape<16>>>,
                                tf::data::part<"right", tf::data::tensor_value<float, tf::shape<16>>>>;
using half_example = tf::data::example<halves, tf::data::tensor_value<std::int32_t, tf::shape<>>>;
inline std::vector<half_example> halves_of(const toy_data& d) {
  std::vector<half_example> out(d.labels.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    for (std::size_t j = 0; j < 16; ++j) {
      out[i].features.get<"left">()[j] = d.features[i * 32 + j];
      out[i].features.get<"right">()[j] = d.features[i * 32 + 16 + j];
    }
    out[i].label[0] = d.labels[i];
  }
  return out;
}

struct run_result {
  std::vector<double> losses;          // the loss after each epoch
  std::vector<double> accuracies;      // sparse_categorical_accuracy after each epoch
  std::vector<float> parameters;       // the parameter region after training
};

// How far a GPU's parameter region is from the CPU's: the largest
// difference, and the largest CPU weight to scale it by.
struct region_distance {
  double worst = 0, largest = 0;
};
template <class Region>
region_distance distance_between(const Region& gpu, const std::vector<float>& cpu) {
  region_distance d;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    d.worst = std::max(d.worst, std::fabs(double{gpu[i]} - cpu[i]));
    d.largest = std::max(d.largest, std::fabs(double{cpu[i]}));
  }
  return d;
}

// The weighted runs: make_data()'s first 150 samples, 9 batches of 16 and a
// last partial one of 6, each sample weighing (i % 4) / 2, or by class.
constexpr int weighted_samples = 150;
inline std::map<int, float> weighted_classes() { return {{0, 2.f}, {3, 0.5f}, {7, 0.f}}; }
inline auto weighted_dataset(const toy_data& d, bool by_sample) {
  std::vector<float> features(d.features.begin(), d.features.begin() + weighted_samples * 32);
  std::vector<std::int32_t> labels(d.labels.begin(), d.labels.begin() + weighted_samples);
  std::vector<float> weights(weighted_samples, 1.f);
  if (by_sample)
    for (int i = 0; i < weighted_samples; ++i) weights[static_cast<std::size_t>(i)] = 0.5f * static_cast<float>(i % 4);
  return tf::data::from_tensor_slices<tf::shape<32>>(std::move(features), std::move(labels), std::move(weights)) |
         tf::data::batch<batch>;
}
inline auto unweighted_dataset(const toy_data& d) {
  return tf::data::from_tensor_slices<tf::shape<32>>(
             std::vector<float>(d.features.begin(), d.features.begin() + weighted_samples * 32),
             std::vector<std::int32_t>(d.labels.begin(), d.labels.begin() + weighted_samples)) |
         tf::data::batch<batch>;
}

// Trains `mlp` (or graph_net) with Adam for `epochs` epochs over make_data() (no shuffle).
run_result train_on_cpu(int epochs);
run_result train_graph_on_cpu(int epochs);
run_result train_two_inputs_on_cpu(int epochs);
// `mlp` over weighted_dataset(by_sample = true), or over its samples with
// weighted_classes() as class_weight (false); the last partial batch trains.
run_result train_weighted_on_cpu(int epochs, bool by_sample);

}  // namespace cuda_reference

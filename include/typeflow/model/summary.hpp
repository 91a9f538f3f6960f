// print_summary<Net>: Keras's model.summary() table.
//
//   Model: "sequential"
//   _________________________________________________________________
//    Layer (type)                Output Shape          Dtype      Param #      Trainable    Output bytes
//   =====================================================================================================
//    layers.1 (dense<512>)       (None, 512)           bfloat16   401,920      401,920      1.00 KB
//   ...
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>

#include "typeflow/precision/policy.hpp"

namespace typeflow {

namespace detail {
inline std::string with_thousands(std::size_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}
inline std::string human_bytes(std::size_t bytes) {
  char text[32];
  if (bytes < 1024)
    std::snprintf(text, sizeof text, "%zu B", bytes);
  else if (bytes >= (std::size_t{1} << 20))
    std::snprintf(text, sizeof text, "%.2f MB", bytes / 1048576.0);
  else
    std::snprintf(text, sizeof text, "%.2f KB", bytes / 1024.0);
  return text;
}
// "(None, 28, 28)": the batch axis first, unknown until a dataset is given.
template <class Shape>
std::string batched_shape() {
  std::string out = "(None";
  for (int d : Shape::dims) out += ", " + std::to_string(d);
  return out + ")";
}
}  // namespace detail

// Each layer's compute dtype (what its arithmetic is rounded to: the
// policy's, a layer's own override, float32 for layers that know only
// float32) and the bytes of its stored output per sample: 2 an element where
// a 16-bit policy stores it in 16 bits, "shared" where the output is the
// input's buffer (flatten, a relu fused into its dense).
template <class Net>
void print_summary(std::FILE* out) {
  const std::string rule(101, '_'), double_rule(101, '=');
  std::fprintf(out, "Model: \"sequential\"  (policy: %s)\n%s\n %-27s %-21s %-10s %-12s %-12s %s\n%s\n",
               policy_name<typename Net::policy>().c_str(), rule.c_str(), "Layer (type)", "Output Shape", "Dtype",
               "Param #", "Trainable", "Output bytes", double_rule.c_str());
  std::size_t activation_bytes = 0;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          using layer = typename Net::template layer<I>;
          const std::string name =
              I == 0 ? "input" : "layers." + std::to_string(I) + " (" + Net::template layer_type_name<I>() + ")";
          const bool shared = I > 0 && Net::output_aliases_input[I];
          const std::size_t bytes = layer::output_shape::size * Net::output_element_bytes[I];
          if (!shared) activation_bytes += bytes;
          // Trained: all but statistics, and nothing of a frozen<...> layer.
          const std::size_t trained = Net::trainable[I] ? layer::params::trainable_count : 0;
          std::fprintf(out, " %-27s %-21s %-10s %-12s %-12s %s\n", name.c_str(),
                       detail::batched_shape<typename layer::output_shape>().c_str(),
                       std::string(I == 0 ? Net::input_dtype::name : layer::compute_dtype::name).c_str(),
                       detail::with_thousands(layer::params::parameter_count).c_str(),
                       detail::with_thousands(trained).c_str(), shared ? "shared" : detail::human_bytes(bytes).c_str());
        }(),
        ...);
  }(std::make_index_sequence<Net::layer_count>{});
  // Statistics (batch_norm's moving mean and variance) and the parameters
  // of frozen<...> layers are parameters the optimizer never trains.
  const std::size_t total = Net::parameter_count;
  const std::size_t trainable = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return (std::size_t{0} + ... + (Net::trainable[I] ? Net::template layer<I>::params::trainable_count : 0));
  }(std::make_index_sequence<Net::layer_count>{});
  std::fprintf(out,
               "%s\nTotal params: %s (%s, float32)\nTrainable params: %s\nNon-trainable params: %s\n"
               "Layer outputs: %s per sample (times the batch in training; a layer's own workspace comes on top)\n%s\n",
               double_rule.c_str(), detail::with_thousands(total).c_str(),
               detail::human_bytes(total * sizeof(float)).c_str(), detail::with_thousands(trainable).c_str(),
               detail::with_thousands(total - trainable).c_str(), detail::human_bytes(activation_bytes).c_str(),
               rule.c_str());
}

}  // namespace typeflow

// print_summary<Net>: Keras's model.summary() table.
//
//   Model: "sequential"
//   _________________________________________________________________
//    Layer (type)                Output Shape              Param #
//   =================================================================
//    layers.1 (dense<512>)       (None, 512)               401,920
//   ...
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>

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
  if (bytes >= (std::size_t{1} << 20))
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

template <class Net>
void print_summary(std::FILE* out) {
  const std::string rule(65, '_'), double_rule(65, '=');
  std::fprintf(out, "Model: \"sequential\"\n%s\n %-27s %-25s %s\n%s\n", rule.c_str(), "Layer (type)",
               "Output Shape", "Param #", double_rule.c_str());
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          using layer = typename Net::template layer<I>;
          const std::string name =
              I == 0 ? "input" : "layers." + std::to_string(I) + " (" + Net::template layer_type_name<I>() + ")";
          std::fprintf(out, " %-27s %-25s %s\n", name.c_str(),
                       detail::batched_shape<typename layer::output_shape>().c_str(),
                       detail::with_thousands(layer::params::parameter_count).c_str());
        }(),
        ...);
  }(std::make_index_sequence<Net::layer_count>{});
  // Statistics (batch_norm's moving mean and variance) are parameters the
  // optimizer never trains.
  const std::size_t total = Net::parameter_count;
  const std::size_t trainable = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return (std::size_t{0} + ... + Net::template layer<I>::params::trainable_count);
  }(std::make_index_sequence<Net::layer_count>{});
  std::fprintf(out, "%s\nTotal params: %s (%s)\nTrainable params: %s\nNon-trainable params: %s\n%s\n",
               double_rule.c_str(), detail::with_thousands(total).c_str(),
               detail::human_bytes(total * sizeof(float)).c_str(), detail::with_thousands(trainable).c_str(),
               detail::with_thousands(total - trainable).c_str(), rule.c_str());
}

}  // namespace typeflow

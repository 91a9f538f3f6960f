// merge_lora(adapted, plain): a model with lora<> adapters folded into a
// model of the same layers without them, for inference and for saving as
// the pretrained layout (layers/lora.hpp):
//
//   tf::model<gpt_with_lora> tuned;   ... fit ...
//   tf::model<gpt> merged;
//   tf::merge_lora(tuned, merged);    // every kernel W + Alpha / Rank · A · B
//
// Every parameter of `plain` is taken from the same-named one of `adapted`
// (a kernel with its adapter folded in); a name or shape that `adapted`
// lacks is refused before anything is copied. save_weights(path,
// {.merge_lora = true}) writes the same values to a file.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace typeflow {

template <class Adapted, class Plain>
void merge_lora(const Adapted& adapted, Plain& plain) {
  const auto source_specs = adapted.parameter_specs();
  std::vector<std::vector<float>> values;
  for (const auto& spec : plain.parameter_specs()) {
    bool found = false;
    for (const auto& s : source_specs)
      if (s.name == spec.name) {
        if (s.shape != spec.shape)
          throw std::invalid_argument("merge_lora: " + spec.name + " has another shape in the adapted model");
        found = true;
      }
    if (!found)
      throw std::invalid_argument("merge_lora: the adapted model has no parameter " + spec.name +
                                  " (both models must have the same layers, one with lora<> and one without)");
    values.push_back(adapted.merged_parameter(spec.name));
  }
  std::size_t k = 0;
  for (const auto& spec : plain.parameter_specs()) {
    auto target = plain.parameter(spec.name);
    for (std::size_t i = 0; i < values[k].size(); ++i) target[i] = values[k][i];
    ++k;
  }
}

}  // namespace typeflow

// merge_executor<Merge, Batch, Device>: runs a merge layer (layers/merge.hpp)
// inside a graph, on any device.
//
// The element functors (layers/merge_functors.hpp) are written once and
// run through the device's for_each_index: OpenMP threads on the CPU, a
// grid-stride kernel on CUDA. A merge has several inputs, so its backward
// goes one input at a time: backward_input(j, d_out, d_in) writes d(loss)/d
// (input j) to d_in, and the graph decides whether that is the input's
// gradient buffer or a buffer it then adds from.
#pragma once

#include <array>
#include <cstddef>

#include "typeflow/layers/merge.hpp"
#include "typeflow/layers/merge_functors.hpp"
#include "typeflow/contract/layer.hpp"

namespace typeflow {

template <class Merge, int Batch, class Device>
class merge_executor : public executor_defaults {
  static constexpr merge_op op = Merge::op;
  static constexpr std::size_t n = Merge::inputs;
  static constexpr std::size_t count = static_cast<std::size_t>(Batch) * Merge::output_shape::size;

 public:
  // The inputs' addresses, the output's, the winners' (maximum, minimum).
  merge_executor(const std::array<const float*, n>& in, float* out, std::byte* workspace,
                 typename Device::context* context)
      : in_(in), out_(out), winner_(reinterpret_cast<float*>(workspace)), context_(context) {}

  void forward() {
    namespace f = detail::merge_fn;
    auto& c = *context_;
    if constexpr (op == merge_op::add || op == merge_op::average || op == merge_op::subtract) {
      const float sign = op == merge_op::subtract ? -1.f : 1.f;
      for_each_index(c, count, f::axpby{in_[0], in_[1], out_, 1.f, sign});
      for (std::size_t j = 2; j < n; ++j) for_each_index(c, count, f::axpby{out_, in_[j], out_, 1.f, 1.f});
      if constexpr (op == merge_op::average)
        for_each_index(c, count, f::axpby{out_, nullptr, out_, 1.f / static_cast<float>(n), 0.f});
    } else if constexpr (op == merge_op::multiply) {
      for_each_index(c, count, f::product{in_[0], in_[1], out_});
      for (std::size_t j = 2; j < n; ++j) for_each_index(c, count, f::product{out_, in_[j], out_});
    } else if constexpr (op == merge_op::maximum || op == merge_op::minimum) {
      constexpr bool is_max = op == merge_op::maximum;
      for_each_index(c, count, f::extreme<is_max>{in_[0], in_[1], out_, winner_, 1.f, true});
      for (std::size_t j = 2; j < n; ++j)
        for_each_index(c, count, f::extreme<is_max>{out_, in_[j], out_, winner_, static_cast<float>(j), false});
    } else if constexpr (op == merge_op::concatenate || op == merge_op::pack) {
      for (std::size_t j = 0; j < n; ++j)
        for_each_index(c, part_count(j), f::place{in_[j], out_, part(j), whole(), offset(j), false});
    } else {
      static_assert(op == merge_op::dot);
      for_each_index(c, static_cast<std::size_t>(Batch), f::row_dot{in_[0], in_[1], out_, Merge::first::size});
    }
  }

  // d_in = d(loss)/d(input j), from d_out = d(loss)/d(output).
  void backward_input(std::size_t j, const float* d_out, float* d_in) {
    namespace f = detail::merge_fn;
    auto& c = *context_;
    if constexpr (op == merge_op::add || op == merge_op::average || op == merge_op::subtract) {
      const float scale = op == merge_op::average ? 1.f / static_cast<float>(n)
                          : (op == merge_op::subtract && j == 1) ? -1.f
                                                                 : 1.f;
      if (scale == 1.f)
        copy_bytes(c, d_in, d_out, count * sizeof(float));
      else
        for_each_index(c, count, f::axpby{d_out, nullptr, d_in, scale, 0.f});
    } else if constexpr (op == merge_op::multiply) {
      // The product of the other inputs, times d_out.
      const float* from = d_out;
      for (std::size_t k = 0; k < n; ++k) {
        if (k == j) continue;
        for_each_index(c, count, f::product{from, in_[k], d_in});
        from = d_in;
      }
    } else if constexpr (op == merge_op::maximum || op == merge_op::minimum) {
      for_each_index(c, count, f::route{d_out, winner_, d_in, static_cast<float>(j)});
    } else if constexpr (op == merge_op::concatenate || op == merge_op::pack) {
      for_each_index(c, part_count(j), f::place{d_out, d_in, part(j), whole(), offset(j), true});
    } else {
      for_each_index(c, static_cast<std::size_t>(Batch) * Merge::first::size,
                     f::scale_rows{d_out, in_[1 - j], d_in, Merge::first::size});
    }
  }

 private:
  // Concatenation and pack: input j's rows of part(j) floats go at offset(j) in rows of whole().
  static constexpr std::size_t part(std::size_t j) { return Merge::part_floats[j]; }
  static constexpr std::size_t whole() { return Merge::whole_floats; }
  static constexpr std::size_t offset(std::size_t j) { return Merge::part_offsets[j]; }
  static constexpr std::size_t part_count(std::size_t j) { return static_cast<std::size_t>(Batch) * Merge::rows * part(j); }

  std::array<const float*, n> in_;
  float* out_;
  float* winner_;
  typename Device::context* context_;
};

// A named input node (functional<>'s several inputs): copies its columns
// out of the packed inputs (B, width) into its own (B, size) buffer, bits
// as they are (int32 ids included). The data takes no gradient.
template <class Slice, int Batch, class Device>
class input_slice_executor : public executor_defaults {
  static constexpr std::size_t size = Slice::output_shape::size;

 public:
  input_slice_executor(const float* packed, float* out, typename Device::context* context)
      : packed_(packed), out_(out), context_(context) {}
  void forward() {
    for_each_index(*context_, static_cast<std::size_t>(Batch) * size,
                   detail::merge_fn::place{packed_, out_, size, Slice::width, Slice::offset, true});
  }

 private:
  const float* packed_;
  float* out_;
  typename Device::context* context_;
};

}  // namespace typeflow

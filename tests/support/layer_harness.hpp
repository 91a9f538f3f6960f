// One bound layer's CPU executor driven directly on buffers of a test's
// own, as a step_program would bind it: the layer tests that check it
// against references (tests/unit/attention_test.cpp) and the replays of the
// GPU's kernels (tests/unit/attention_rows_test.cpp, conv_rows_test.cpp).
// Layer is a testing::bound_layer (it names its spec).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <typeflow/typeflow.hpp>
#include <typeflow/backend/cpu/executors.hpp>

namespace typeflow::testing {

// A deterministic pseudo-random value in [low, high) for index i.
inline float wobble(std::uint64_t i, std::uint64_t salt, float low = -1.f, float high = 1.f) {
  return low + (high - low) * typeflow::random_stream{8642 + salt, 0}.uniform(i);
}

// What a gradient entry holds before backward: the layer must overwrite it.
inline constexpr float untouched = 12345.f;

// 64-byte aligned bytes, as the model's arena hands them out, filled with
// NaNs: a layer that read workspace or scratch it has not written (the
// masked triangle, say) would carry them into its results.
struct aligned_bytes {
  struct release {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<std::byte, release> data;
  explicit aligned_bytes(std::size_t bytes)
      : data(static_cast<std::byte*>(std::aligned_alloc(64, typeflow::align_up(bytes > 0 ? bytes : 1)))) {
    std::memset(data.get(), 0xFF, typeflow::align_up(bytes > 0 ? bytes : 1));
  }
  std::byte* get() const { return data.get(); }
};

// One bound layer's executor on buffers of its own.
template <class Layer, int Batch>
struct harness {
  static constexpr std::size_t in_size = Batch * Layer::input_shape::size;
  static constexpr std::size_t out_size = Batch * Layer::output_shape::size;
  using params = typename Layer::params;

  typeflow::backend::cpu::context context;
  std::vector<float> in, out, d_out, d_in, parameters, grads;
  aligned_bytes workspace, scratch;
  typeflow::run_state run{.training = true, .seed = 5, .step = 1};
  typeflow::executor<typename Layer::spec, Layer, Batch, typeflow::cpu> executor;
  aligned_bytes scratchpad;

  explicit harness(bool with_input_gradient = true)
      : in(in_size),
        out(out_size),
        d_out(out_size),
        d_in(in_size),
        parameters(params::floats),
        grads(params::floats, untouched),
        workspace(Batch * Layer::workspace_bytes_per_sample + Layer::workspace_bytes_per_step),
        scratch(Batch * Layer::scratch_bytes_per_sample + Layer::scratch_bytes_per_step),
        executor(io(with_input_gradient)),
        scratchpad(executor.scratchpad_bytes()) {
    executor.bind(scratchpad.get());
  }

  typeflow::layer_io<typeflow::cpu> io(bool with_input_gradient) {
    typeflow::layer_io<typeflow::cpu> io;
    io.in = in.data();
    io.out = out.data();
    io.d_in = with_input_gradient ? d_in.data() : nullptr;
    io.d_out = d_out.data();
    io.params = parameters.data();
    io.grads = grads.data();
    io.workspace = workspace.get();
    io.scratch = scratch.get();
    io.context = &context;
    io.run = &run;
    return io;
  }

  // Parameter I's element (r, c) of its logical (rows, row_length) matrix.
  template <std::size_t I>
  static std::size_t stored_index(std::size_t element) {
    using P = std::tuple_element_t<I, typename params::tuple>;
    return params::template offset<I> + element / P::row_length * P::row_stride + element % P::row_length;
  }
  template <std::size_t I>
  static constexpr std::size_t size_of = std::tuple_element_t<I, typename params::tuple>::size;
  template <std::size_t I>
  float& param(std::size_t element) { return parameters[stored_index<I>(element)]; }
  template <std::size_t I>
  float grad(std::size_t element) const { return grads[stored_index<I>(element)]; }

  // Random x and d_out in [-1, 1), and parameters in [-0.5, 0.5) (biases
  // too, so that every one matters).
  void fill_randomly(std::uint64_t salt = 0) {
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = wobble(i, 10 + salt);
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((fill_param<I>(salt)), ...);
    }(std::make_index_sequence<params::count>{});
    for (std::size_t i = 0; i < d_out.size(); ++i) d_out[i] = wobble(i, 30 + salt);
  }
  template <std::size_t I>
  void fill_param(std::uint64_t salt) {
    for (std::size_t e = 0; e < size_of<I>; ++e) param<I>(e) = 0.5f * wobble(e, 20 + I + salt);
  }

  // L = sum(out * d_out), whose gradients backward computes.
  double objective() {
    executor.forward();
    double sum = 0;
    for (std::size_t i = 0; i < out.size(); ++i) sum += double{out[i]} * d_out[i];
    return sum;
  }
};

}  // namespace typeflow::testing

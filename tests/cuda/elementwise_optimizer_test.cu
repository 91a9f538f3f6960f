// The element-wise and optimizer kernels on a device, against the CPU paths:
// maps over misaligned pointers and odd sizes, 16-bit conversions, the
// activations, dropout's mask (against the CPU dropout layer), each optimizer
// over three steps (against its update()), clipping, the skipped non-finite
// step, a whole step captured in a graph and replayed, and zero<k>'s
// sharded optimizer against the whole region's.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "typeflow/backend/cuda/kernels/elementwise.cuh"
#include "typeflow/backend/cuda/device_optimizer.hpp"
#include "typeflow/backend/cuda/optimizer.hpp"
#include "typeflow/backend/cuda/runtime.hpp"
#include "typeflow/core/functors.hpp"
#include "typeflow/core/half.hpp"
#include "typeflow/distribute/zero.hpp"
#include "typeflow/backend/cpu/dropout.hpp"
#include "typeflow/optimizers/device_update.hpp"
#include "typeflow/optimizers/optimizers.hpp"

namespace tf = typeflow;
namespace cu = typeflow::backend::cuda;
namespace opt = typeflow::optimizers;
namespace od = typeflow::optimizers::device;

namespace {

// ---------------------------------------------------------------------------
// Helpers.

template <class T>
struct device_array {
  cu::device_buffer buffer;
  std::size_t size = 0;
  explicit device_array(std::size_t n) : buffer(n * sizeof(T)), size(n) {}
  explicit device_array(const std::vector<T>& host) : device_array(host.size()) { upload(host); }
  T* get() const { return buffer.data<T>(); }
  void upload(const std::vector<T>& host) {
    cu::copy_to_device(get(), host.data(), host.size() * sizeof(T));
  }
  std::vector<T> download() const {
    std::vector<T> host(size);
    if (size) TYPEFLOW_CUDA_CHECK(cudaMemcpy(host.data(), get(), size * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
};

template <class T>
T read_device(const T* p) {
  T value;
  TYPEFLOW_CUDA_CHECK(cudaMemcpy(&value, p, sizeof(T), cudaMemcpyDeviceToHost));
  return value;
}

std::vector<float> random_vector(std::mt19937& gen, std::size_t n, float spread) {
  std::normal_distribution<float> normal(0.f, spread);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(gen);
  return v;
}

template <class T>
std::uint32_t bits(T x) {
  if constexpr (sizeof(T) == 4)
    return std::bit_cast<std::uint32_t>(x);
  else
    return std::bit_cast<std::uint16_t>(x);
}

struct times_three {
  __device__ float operator()(float x) const { return x * 3.f; }  // one rounding: the host's bits
};
struct difference {
  __device__ float operator()(float a, float b) const { return a - b; }
};

constexpr float guard = -12345.f;  // elements outside [0, n) must keep it

}  // namespace

// ---------------------------------------------------------------------------
// Maps.

TEST_CASE("map and map2 cover odd sizes over misaligned pointers, in place too, and touch nothing else") {
  cu::stream s;
  std::mt19937 gen(1);
  const std::size_t sizes[] = {1, 3, 4, 5, 1023, (1u << 20) + 3};
  for (std::size_t n : sizes) {
    const std::vector<float> a = random_vector(gen, n + 8, 1.f), b = random_vector(gen, n + 8, 1.f);
    device_array<float> da(a), db(b);
    for (int in_offset : {0, 1, 3})
      for (int out_offset : {0, 1, 2}) {
        CAPTURE(n);
        CAPTURE(in_offset);
        CAPTURE(out_offset);
        device_array<float> out(std::vector<float>(n + 8, guard));
        cu::map(da.get() + in_offset, out.get() + out_offset, n, times_three{}, s.get());
        s.synchronize();
        std::vector<float> got = out.download();
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < n + 8; ++i) {
          const bool inside = i >= static_cast<std::size_t>(out_offset) && i < n + out_offset;
          const float expected = inside ? a[i - out_offset + in_offset] * 3.f : guard;
          wrong += bits(got[i]) != bits(expected);
        }
        CHECK(wrong == 0);

        out.upload(std::vector<float>(n + 8, guard));
        cu::map2(da.get() + in_offset, db.get() + out_offset, out.get() + out_offset, n, difference{}, s.get());
        s.synchronize();
        got = out.download();
        wrong = 0;
        for (std::size_t i = 0; i < n + 8; ++i) {
          const bool inside = i >= static_cast<std::size_t>(out_offset) && i < n + out_offset;
          const float expected = inside ? a[i - out_offset + in_offset] - b[i] : guard;
          wrong += bits(got[i]) != bits(expected);
        }
        CHECK(wrong == 0);
      }
    // In place.
    device_array<float> x(a);
    cu::scale(x.get() + 1, n, 0.5f, s.get());
    s.synchronize();
    const std::vector<float> got = x.download();
    std::size_t wrong = bits(got[0]) != bits(a[0]);
    for (std::size_t i = 1; i <= n; ++i) wrong += bits(got[i]) != bits(a[i] * 0.5f);
    for (std::size_t i = n + 1; i < n + 8; ++i) wrong += bits(got[i]) != bits(a[i]);
    CHECK(wrong == 0);
  }
}

TEST_CASE("to_16bit and from_16bit give core/half.hpp's bits, specials and misaligned pointers included") {
  cu::stream s;
  std::mt19937 gen(2);
  const std::size_t n = 4099;
  std::vector<float> x = random_vector(gen, n + 8, 100.f);
  const float specials[] = {0.f, -0.f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::nanf(""), std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0xffc12345u),
                            65504.f, 65520.f, 1e-8f, -3e-7f, std::numeric_limits<float>::denorm_min(), 1e38f,
                            std::bit_cast<float>(0x3f808000u), std::bit_cast<float>(0x3f818000u)};
  for (std::size_t i = 0; i < std::size(specials); ++i) x[7 * i + 1] = specials[i];
  device_array<float> dx(x);
  for (int in_offset : {0, 1, 2})
    for (int out_offset : {0, 1, 5}) {
      CAPTURE(in_offset);
      CAPTURE(out_offset);
      device_array<__half> h(n + 8);
      device_array<tf::bf16> b(n + 8);
      cu::to_16bit(dx.get() + in_offset, h.get() + out_offset, n, s.get());
      cu::to_16bit(dx.get() + in_offset, b.get() + out_offset, n, s.get());
      device_array<float> back_h(n), back_b(n);
      cu::from_16bit(h.get() + out_offset, back_h.get(), n, s.get());
      cu::from_16bit(b.get() + out_offset, back_b.get(), n, s.get());
      s.synchronize();
      const std::vector<__half> got_h = h.download();
      const std::vector<tf::bf16> got_b = b.download();
      const std::vector<float> got_back_h = back_h.download(), got_back_b = back_b.download();
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const float v = x[i + in_offset];
        const tf::f16 eh(v);
        const tf::bf16 eb(v);
        wrong += tf::f16(got_h[i + out_offset]).bits() != eh.bits();
        wrong += got_b[i + out_offset].bits() != eb.bits();
        wrong += bits(got_back_h[i]) != bits(static_cast<float>(eh));
        wrong += bits(got_back_b[i]) != bits(static_cast<float>(eb));
      }
      CHECK(wrong == 0);
    }
}

// ---------------------------------------------------------------------------
// Activations.

namespace {
template <class F>
void check_activation(const char* what) {
  const std::string name = what;
  CAPTURE(name);
  cu::stream s;
  std::mt19937 gen(3);
  const std::size_t n = 100003;
  std::vector<float> x = random_vector(gen, n, 3.f), dy = random_vector(gen, n, 1.f);
  x[0] = 0.f, x[1] = -0.f, x[2] = 30.f, x[3] = -30.f, x[4] = 100.f, x[5] = -100.f;
  device_array<float> dx_(x), ddy(dy), y(n), grad(n);
  cu::activation_forward<F>(dx_.get(), y.get(), n, s.get());
  s.synchronize();
  const std::vector<float> got_y = y.download();
  const std::vector<float>& from_host = F::derivative_from_output ? got_y : x;
  const float* from = F::derivative_from_output ? y.get() : dx_.get();
  cu::activation_backward<F>(from, ddy.get(), grad.get(), n, s.get());
  cu::activation_backward<F>(from, ddy.get(), ddy.get(), n, s.get());  // in place: dx is dy
  s.synchronize();
  const std::vector<float> got_grad = grad.download(), got_in_place = ddy.download();
  double worst_y = 0, worst_g = 0;
  std::size_t in_place_wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float ey = F{}.value(x[i]);
    float d;
    if constexpr (F::derivative_from_output)
      d = F{}.derivative_at_output(from_host[i]);
    else
      d = F{}.derivative_at_input(from_host[i]);
    const float eg = dy[i] * d;
    // Errors relative to the size of the terms: x * Phi(x) and 1 + erf(.)
    // cancel, so a result can be far smaller than its rounding.
    worst_y = std::max(worst_y, std::abs(double{got_y[i]} - ey) / (std::abs(double{ey}) + std::abs(double{x[i]}) + 1e-30));
    worst_g = std::max(worst_g, std::abs(double{got_grad[i]} - eg) / (std::abs(double{eg}) + std::abs(double{dy[i]}) + 1e-30));
    in_place_wrong += bits(got_in_place[i]) != bits(got_grad[i]);
  }
  CHECK(worst_y < 4e-6);  // libm's and CUDA's tanh/exp differ by an ulp or two; the device fuses multiply-adds
  CHECK(worst_g < 4e-6);
  CHECK(in_place_wrong == 0);
}
}  // namespace

TEST_CASE("activations forward and backward match the shared host functors") {
  check_activation<tf::functors::relu>("relu");
  check_activation<tf::functors::tanh_fn>("tanh");
  check_activation<tf::functors::sigmoid>("sigmoid");
  check_activation<tf::functors::gelu_exact>("gelu");
  check_activation<tf::functors::gelu_tanh>("gelu_tanh");
}

// ---------------------------------------------------------------------------
// Dropout.

TEST_CASE("dropout draws the CPU dropout layer's mask, and backward regenerates it") {
  constexpr float rate = 0.3f;
  constexpr std::size_t size = 1001;
  constexpr int batch = 5;
  constexpr std::size_t count = size * batch;
  using context = tf::layer_context<4, void, void>;
  using layer = tf::dropout<rate>::bind<tf::shape<size>, context>;
  std::mt19937 gen(4);
  const std::vector<float> x = random_vector(gen, count + 4, 1.f), dy = random_vector(gen, count + 4, 1.f);
  cu::stream s;
  device_array<float> dx_(x), ddy(dy);
  device_array<std::uint64_t> device_step(1);
  for (std::uint64_t step : {1u, 2u, 9u}) {
    CAPTURE(step);
    // The CPU layer.
    std::vector<float> out(count), grad(dy.begin(), dy.begin() + count);
    std::vector<std::byte> keep(layer::workspace_bytes_per_sample * batch);
    tf::run_state run{.training = true, .seed = 42, .step = step};
    tf::layer_io<tf::cpu> io;
    io.in = x.data();
    io.out = out.data();
    io.d_in = grad.data();
    io.d_out = grad.data();
    io.workspace = keep.data();
    io.run = &run;
    io.salt = 4;
    tf::executor<tf::dropout<rate>, layer, batch, tf::cpu> cpu(io);
    cpu.forward();
    cpu.backward();

    const std::uint64_t seed = tf::dropout_seed(42, io.salt);
    cu::set_device_value(device_step.get(), step, s.get());
    for (int offset : {0, 1}) {  // aligned (vector path) and not (scalar path)
      CAPTURE(offset);
      device_array<float> y(count + 4), dgrad(count + 4);
      device_array<std::uint8_t> mask(count + 4);
      const cu::dropout_draw draw = offset ? cu::dropout_draw{seed, 0, device_step.get()} : cu::dropout_draw{seed, step};
      cu::dropout_forward(dx_.get() + offset, y.get() + offset, mask.get() + offset, count, rate, draw, s.get());
      cu::dropout_backward(ddy.get() + offset, dgrad.get() + offset, count, rate, draw, s.get());
      s.synchronize();
      const std::vector<float> got_y = y.download(), got_g = dgrad.download();
      const std::vector<std::uint8_t> got_mask = mask.download();
      // The CPU's layer ran on x[0, count); the device's on x[offset, count + offset),
      // with the same mask: element i of the range is kept as the CPU's element i.
      const tf::dropout_mask m = tf::make_dropout_mask(seed, step, rate);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < count; ++i) {
        wrong += got_mask[i + offset] != static_cast<std::uint8_t>(keep[i]);
        wrong += bits(got_y[i + offset]) != bits(keep[i] != std::byte{0} ? x[i + offset] * m.scale : 0.f);
        if (offset == 0) wrong += bits(got_y[i]) != bits(out[i]);
      }
      CHECK(wrong == 0);
      // The CPU's backward ran on dy[0, count); the device's on dy[offset, count + offset).
      wrong = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const float expected = m.keep(i) ? dy[i + offset] * m.scale : 0.f;
        wrong += bits(got_g[i + offset]) != bits(expected);
        if (offset == 0) wrong += bits(got_g[i]) != bits(grad[i]);
      }
      CHECK(wrong == 0);
    }
  }
  // In place, in bf16: the CPU's 16-bit rule (to float, scale, round back).
  const std::size_t n = 4097;
  std::vector<tf::bf16> h(n);
  for (std::size_t i = 0; i < n; ++i) h[i] = tf::bf16(x[i]);
  device_array<tf::bf16> dh(h);
  cu::dropout_forward(dh.get(), dh.get(), nullptr, n, 0.5f, {7, 3}, s.get());
  s.synchronize();
  const std::vector<tf::bf16> got = dh.download();
  const tf::dropout_mask m = tf::make_dropout_mask(7, 3, 0.5f);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i)
    wrong += got[i].bits() != tf::bf16(m.keep(i) ? static_cast<float>(h[i]) * m.scale : 0.f).bits();
  CHECK(wrong == 0);
}

TEST_CASE("element-wise kernels in a captured graph replay like eager calls, dropout drawing each replay's step") {
  const std::size_t n = 10001;
  std::mt19937 gen(5);
  const std::vector<float> x = random_vector(gen, n, 1.f);
  cu::stream s;
  device_array<float> dx_(x), y(n), z(n);
  device_array<tf::bf16> h(n);
  device_array<std::uint64_t> step(1);
  auto record = [&](cudaStream_t cs, cu::dropout_draw draw) {
    cu::activation_forward<tf::functors::gelu_exact>(dx_.get(), y.get(), n, cs);
    cu::dropout_forward(y.get(), z.get(), nullptr, n, 0.2f, draw, cs);
    cu::to_16bit(z.get(), h.get(), n, cs);
  };
  cu::graph g;
  g.capture(s.get(), [&](cudaStream_t cs) {  // the short form, as layers.hpp calls it
    cu::activation_forward<tf::functors::gelu_exact>(dx_.get(), y.get(), n, cs);
    cu::dropout_forward(y.get(), z.get(), n, 0.2f, 123, step.get(), cs);
    cu::to_16bit(z.get(), h.get(), n, cs);
  });
  for (std::uint64_t k : {5u, 6u, 5u}) {
    CAPTURE(k);
    cu::set_device_value(step.get(), k, s.get());
    g.launch(s.get());
    s.synchronize();
    const std::vector<float> got = z.download();
    const std::vector<tf::bf16> got_h = h.download();
    record(s.get(), {123, k});  // eager, the step by value
    s.synchronize();
    const std::vector<float> eager = z.download();
    const std::vector<tf::bf16> eager_h = h.download();
    const std::vector<float> activated = y.download();
    const tf::dropout_mask m = tf::make_dropout_mask(123, k, 0.2f);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      wrong += bits(got[i]) != bits(eager[i]);
      wrong += got_h[i].bits() != eager_h[i].bits();
      wrong += bits(got[i]) != bits(m.keep(i) ? activated[i] * m.scale : 0.f);
    }
    CHECK(wrong == 0);
  }
}

// ---------------------------------------------------------------------------
// The optimizer.

namespace {

// Tensors of every kind, out of offset order, odd sizes, padding between
// them and after the last; several chunks per large tensor.
constexpr std::size_t floats = 140000;
std::vector<opt::parameter_tensor> scenario_tensors() {
  using k = tf::param_kind;
  return {{90816, 40000, k::kernel},  {0, 70001, k::kernel},   {70016, 37, k::bias}, {70064, 64, k::statistic},
          {70144, 20000, k::embedding}, {90144, 333, k::scale}, {90480, 333, k::offset}};
}

struct state_arrays {
  std::vector<float> weights;
  std::vector<std::vector<float>> slots;
};

// The CPU optimizer, train/model.hpp's way (loss scale optional).
template <class O>
state_arrays run_cpu(const O& o, const std::vector<float>& weights, const std::vector<std::vector<float>>& step_grads,
                     std::optional<tf::precision::dynamic_loss_scale> scaling = {}) {
  const auto tensors = scenario_tensors();
  state_arrays r{weights, std::vector<std::vector<float>>(o.slot_count(), std::vector<float>(floats, 0.f))};
  std::vector<float*> slot_pointers;
  for (auto& v : r.slots) slot_pointers.push_back(v.data());
  std::optional<tf::precision::loss_scale> scale;
  if (scaling) scale.emplace(*scaling);
  std::int64_t iterations = 0;
  for (const auto& grads : step_grads) {
    std::vector<float> g = grads;
    if (scale) {
      const bool finite = tf::precision::unscale_all_finite(g.data(), g.size(), scale->scale());
      if (!scale->after_step(finite)) continue;
    }
    opt::update_arguments a;
    a.weights = r.weights.data();
    a.grads = g.data();
    a.slots = slot_pointers.data();
    a.floats = static_cast<std::ptrdiff_t>(floats);
    a.tensors = tensors;
    a.iteration = ++iterations;
    o.update(a);
  }
  return r;
}

// Everything one model's device step holds.
template <class O>
struct device_step {
  using rule = opt::rule_of<O>;
  O o;
  od::update_plan host_plan;
  cu::device_update_plan plan;
  device_array<float> weights, grads;
  std::vector<device_array<float>> slots;
  device_array<std::byte> workspace;
  device_array<double> tensor_norms;
  device_array<od::gradient_statistics> statistics;
  device_array<od::step_state> state;
  device_array<od::step_table<rule>> table;

  device_step(const O& optimizer, const std::vector<float>& w, od::step_state initial, int offset = 0)
      : o(optimizer),
        host_plan(od::make_update_plan(scenario_tensors(), floats, optimizer.weight_decay_applies_to)),
        plan(host_plan),
        weights(floats + offset),
        grads(floats + offset),
        workspace(plan.statistics_workspace_bytes()),
        tensor_norms(plan.tensor_count()),
        statistics(1),
        state(std::vector<od::step_state>{initial}),
        table(1),
        offset_(offset) {
    std::vector<float> padded(floats + offset, 0.f);
    std::copy(w.begin(), w.end(), padded.begin() + offset);
    weights.upload(padded);
    for (int k = 0; k < optimizer.slot_count(); ++k) slots.emplace_back(std::vector<float>(floats + offset, 0.f));
  }
  cu::slot_pointers slot_pointers() const {
    cu::slot_pointers p;
    for (std::size_t k = 0; k < slots.size(); ++k) p.slot[k] = slots[k].get() + offset_;
    return p;
  }
  void upload_grads(const std::vector<float>& g, cudaStream_t s) {
    TYPEFLOW_CUDA_CHECK(cudaMemcpyAsync(grads.get() + offset_, g.data(), floats * sizeof(float), cudaMemcpyHostToDevice, s));
  }
  void statistics_pass(cudaStream_t s) {
    cu::gradient_statistics(grads.get() + offset_, plan, state.get(), statistics.get(), tensor_norms.get(),
                            workspace.get(), workspace.size, s);
  }
  // Eager: this step's values as kernel arguments.
  void eager(const std::vector<float>& g, std::int64_t iteration, cudaStream_t s) {
    upload_grads(g, s);
    statistics_pass(s);
    cu::apply_update(weights.get() + offset_, grads.get() + offset_, slot_pointers(), plan, opt::clip_options_of(o),
                     statistics.get(), tensor_norms.get(), opt::step_values_for(o, iteration), false, s);
    cu::finish_step(state.get(), statistics.get(), nullptr, nullptr, s);
  }
  // Graph-ready: every per-step value from device memory.
  void record(cu::step_readback* readback, cudaStream_t s) {
    statistics_pass(s);
    cu::apply_update(weights.get() + offset_, grads.get() + offset_, slot_pointers(), plan, opt::clip_options_of(o),
                     statistics.get(), tensor_norms.get(), state.get(), table.get(), s);
    cu::finish_step(state.get(), statistics.get(), &table.get()->header, readback, s);
  }
  state_arrays download() const {
    state_arrays r;
    r.weights = weights.download();
    r.weights.erase(r.weights.begin(), r.weights.begin() + offset_);
    for (const auto& v : slots) {
      r.slots.push_back(v.download());
      r.slots.back().erase(r.slots.back().begin(), r.slots.back().begin() + offset_);
    }
    return r;
  }

 private:
  int offset_;
};

// |gpu - cpu| within float rounding of a few operations (the device fuses
// multiply-adds that the host may not). A fused multiply-add can also flip
// lion's sign(c) where c is within a rounding of 0 (about 1 in 2e7
// elements), moving that weight by lr or 2 lr: `outliers` such are allowed.
void check_close(const state_arrays& gpu, const state_arrays& cpu, std::size_t outliers = 0) {
  std::size_t beyond = 0;
  auto compare = [&](const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      beyond += std::abs(double{a[i]} - b[i]) > 1e-5 * std::abs(double{b[i]}) + 1e-7;
  };
  compare(gpu.weights, cpu.weights);
  REQUIRE(gpu.slots.size() == cpu.slots.size());
  for (std::size_t k = 0; k < cpu.slots.size(); ++k) compare(gpu.slots[k], cpu.slots[k]);
  CHECK(beyond <= outliers);
}

bool bit_identical(const state_arrays& a, const state_arrays& b) {
  auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  if (!same(a.weights, b.weights) || a.slots.size() != b.slots.size()) return false;
  for (std::size_t k = 0; k < a.slots.size(); ++k)
    if (!same(a.slots[k], b.slots[k])) return false;
  return true;
}

template <class O>
void check_optimizer(O o, const char* what) {
  std::mt19937 gen(6);
  const std::vector<float> weights = random_vector(gen, floats, 0.5f);
  std::vector<std::vector<float>> grads;
  for (int step = 0; step < 3; ++step) grads.push_back(random_vector(gen, floats, 0.01f));
  struct clip_case {
    const char* name;
    std::optional<float> clipnorm, clipvalue, global_clipnorm;
  };
  // Tensor norms here run 0.06 .. 2.6, the global one about 3.7.
  const clip_case clips[] = {{"none", {}, {}, {}},
                             {"clipnorm", 1.f, {}, {}},
                             {"clipvalue", {}, 0.01f, {}},
                             {"global_clipnorm", {}, {}, 2.f},
                             {"global_clipnorm above the norm", {}, {}, 100.f}};
  cu::stream s;
  for (const clip_case& c : clips) {
    const std::string label = std::string(what) + ", " + c.name;
    CAPTURE(label);
    o.clipnorm = c.clipnorm;
    o.clipvalue = c.clipvalue;
    o.global_clipnorm = c.global_clipnorm;
    o.validate();
    const state_arrays cpu = run_cpu(o, weights, grads);
    for (int offset : {0, 1}) {  // float4 path, and the scalar one
      CAPTURE(offset);
      device_step<O> d(o, weights, od::make_step_state(), offset);
      for (int step = 0; step < 3; ++step) d.eager(grads[step], step + 1, s.get());
      s.synchronize();
      check_close(d.download(), cpu, std::is_same_v<O, opt::lion> ? 4 : 0);
      CHECK(read_device(d.state.get()).iterations == 3);
    }
  }
}

}  // namespace

TEST_CASE("each optimizer rule over three steps matches the CPU optimizer, with every kind of clipping") {
  check_optimizer(opt::adam{.learning_rate = 0.01}, "adam");
  check_optimizer(opt::adam{.learning_rate = 0.01, .amsgrad = true, .weight_decay = 0.1f}, "adam amsgrad decay");
  check_optimizer(opt::adamw{.learning_rate = 0.01, .weight_decay = 0.05f}, "adamw");
  check_optimizer(opt::sgd{.learning_rate = 0.1}, "sgd");
  check_optimizer(opt::sgd{.learning_rate = 0.1, .momentum = 0.9f, .weight_decay = 0.01f}, "sgd momentum");
  check_optimizer(opt::sgd{.learning_rate = 0.1, .momentum = 0.9f, .nesterov = true}, "sgd nesterov");
  check_optimizer(opt::lion{.learning_rate = 0.001, .weight_decay = 0.1f}, "lion");
  check_optimizer(opt::rmsprop{.learning_rate = 0.01}, "rmsprop");
  check_optimizer(opt::rmsprop{.learning_rate = 0.01, .momentum = 0.5f, .centered = true, .weight_decay = 0.02f},
                  "rmsprop momentum centered decay");
}

TEST_CASE("gradient statistics: the norms apply_update takes, deterministic, unscaled in place") {
  std::mt19937 gen(7);
  const auto tensors = scenario_tensors();
  std::vector<float> g = random_vector(gen, floats, 3.f);
  const opt::adam o{};
  cu::stream s;
  device_step<opt::adam> d(o, std::vector<float>(floats, 0.f), od::make_step_state(tf::precision::fixed_loss_scale{4.f}));
  d.upload_grads(g, s.get());
  d.statistics_pass(s.get());
  s.synchronize();
  const od::gradient_statistics first = read_device(d.statistics.get());
  const std::vector<double> norms = d.tensor_norms.download();
  std::vector<float> unscaled = g;
  CHECK(tf::precision::unscale_all_finite(unscaled.data(), unscaled.size(), 4.f));
  std::vector<float> got = d.grads.download();
  CHECK(std::memcmp(got.data(), unscaled.data(), floats * sizeof(float)) == 0);
  CHECK(first.all_finite == 1);
  double global = 0;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    double sum = 0;
    for (std::size_t i = tensors[t].offset; i < tensors[t].offset + tensors[t].size; ++i) sum += double{unscaled[i]} * unscaled[i];
    if (tensors[t].kind == tf::param_kind::statistic) {
      CHECK(norms[t] == 0.0);
    } else {
      CHECK(norms[t] == doctest::Approx(sum).epsilon(1e-12));
      global += sum;
    }
  }
  CHECK(first.squared_norm == doctest::Approx(global).epsilon(1e-12));
  // The same gradients again: the same bits.
  for (int again = 0; again < 3; ++again) {
    d.upload_grads(g, s.get());
    d.statistics_pass(s.get());
    s.synchronize();
    const od::gradient_statistics next = read_device(d.statistics.get());
    CHECK(std::bit_cast<std::uint64_t>(next.squared_norm) == std::bit_cast<std::uint64_t>(first.squared_norm));
    const std::vector<double> next_norms = d.tensor_norms.download();
    CHECK(std::memcmp(next_norms.data(), norms.data(), norms.size() * sizeof(double)) == 0);
  }
  // The factor given by value instead of read from the state: the same.
  d.upload_grads(g, s.get());
  cu::gradient_statistics(d.grads.get(), d.plan, 0.25f, d.statistics.get(), nullptr, d.workspace.get(), d.workspace.size,
                          s.get());
  s.synchronize();
  got = d.grads.download();
  CHECK(std::memcmp(got.data(), unscaled.data(), floats * sizeof(float)) == 0);
  CHECK(std::bit_cast<std::uint64_t>(read_device(d.statistics.get()).squared_norm) ==
        std::bit_cast<std::uint64_t>(first.squared_norm));
}

TEST_CASE("a non-finite gradient under loss scaling skips the step: weights and slots stay bit-identical") {
  std::mt19937 gen(8);
  const std::vector<float> weights = random_vector(gen, floats, 0.5f);
  const opt::adamw o{.learning_rate = 0.01, .weight_decay = 0.05f, .global_clipnorm = 1.f};
  cu::stream s;
  device_step<opt::adamw> d(o, weights, od::make_step_state(tf::precision::dynamic_loss_scale{}));
  cu::set_device_value(d.table.get(), od::step_table_for(o, 1, 2), s.get());
  std::vector<float> g = random_vector(gen, floats, 100.f);
  d.upload_grads(g, s.get());
  d.record(nullptr, s.get());  // a finite step first, so that the slots hold something
  s.synchronize();
  const state_arrays before = d.download();
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    g[70020] = bad;  // inside the bias
    d.upload_grads(g, s.get());
    d.record(nullptr, s.get());
    s.synchronize();
    CHECK(bit_identical(d.download(), before));
  }
  const od::step_state state = read_device(d.state.get());
  CHECK(state.iterations == 1);
  CHECK(state.skipped == 2);
  CHECK(state.loss_scale == 32768.f / 4.f);
  CHECK(state.last_applied == 0);
}

TEST_CASE("a whole step captured in a graph replays like eager steps and like the CPU model, skips included") {
  std::mt19937 gen(9);
  const std::vector<float> weights = random_vector(gen, floats, 0.5f);
  const opt::adam o{.learning_rate = tf::schedules::cosine_decay{0.01, 6}, .global_clipnorm = 2.f};
  const tf::precision::dynamic_loss_scale scaling{1024.f, 2};
  std::vector<std::vector<float>> grads;
  for (int step = 0; step < 5; ++step) {
    grads.push_back(random_vector(gen, floats, 0.01f * 1024.f));
    if (step == 2) grads.back()[123] = std::numeric_limits<float>::infinity();
  }
  // The loss scale changes with the steps, so scale each step's gradients by
  // the scale the CPU model would have used (2 finite steps double it).
  tf::precision::loss_scale cpu_scale(scaling);
  for (auto& g : grads) {
    const float factor = cpu_scale.scale() / 1024.f;
    for (float& x : g) x *= factor;
    cpu_scale.after_step(std::isfinite(g[123]));
  }
  const state_arrays cpu = run_cpu(o, weights, grads, scaling);

  cu::stream s;
  cu::step_readback readback(4);
  device_step<opt::adam> graphed(o, weights, od::make_step_state(scaling));
  cu::graph g;
  g.capture(s.get(), [&](cudaStream_t cs) { graphed.record(&readback, cs); });
  std::vector<od::step_report> reports;
  for (const auto& step_grads : grads) {
    readback.make_room();
    // The host does not wait for earlier steps: the table covers every
    // update number the device may have reached.
    cu::set_device_value(graphed.table.get(),
                         od::step_table_for(o, readback.first_possible_iteration(), readback.possible_iterations()),
                         s.get());
    graphed.upload_grads(step_grads, s.get());
    g.launch(s.get());
    readback.mark(s.get());
    while (auto r = readback.poll()) reports.push_back(*r);
  }
  while (readback.has_unread()) reports.push_back(readback.wait());
  s.synchronize();
  REQUIRE(reports.size() == grads.size());
  for (std::size_t k = 0; k < reports.size(); ++k) {
    CAPTURE(k);
    CHECK(reports[k].step == static_cast<std::int64_t>(k + 1));
    CHECK(reports[k].applied == (k != 2));
    CHECK(reports[k].all_finite == (k != 2));
    CHECK(reports[k].table_missed == 0);
  }
  CHECK(reports.back().iterations == 4);
  CHECK(reports.back().skipped == 1);
  CHECK(reports.back().loss_scale == cpu_scale.scale());
  const state_arrays from_graph = graphed.download();
  check_close(from_graph, cpu);

  // The same steps uncaptured, with the same device-side values: the same bits.
  device_step<opt::adam> eager(o, weights, od::make_step_state(scaling));
  for (const auto& step_grads : grads) {
    cu::set_device_value(eager.table.get(), od::step_table_for(o, 1, 6), s.get());
    eager.upload_grads(step_grads, s.get());
    eager.record(nullptr, s.get());
  }
  s.synchronize();
  CHECK(bit_identical(eager.download(), from_graph));
}

// ---------------------------------------------------------------------------
// zero<k>'s device optimizer: each replica's optimizer over its shard of the
// region (device_update.hpp's plan_range), its slots holding the shard
// alone, run pass by pass with the shards' statistics summed between the
// passes and the weights all-gathered after (on one GPU: several arenas,
// the sums and the gathers through the host, as NCCL would do them).

namespace {

// One replica's arena as the engine lays it out: weights, gradients, then
// `slot_count` slots of `slot_floats` each.
struct optimizer_arena {
  static constexpr int slot_count = 4;  // enough for adam's two and accumulate<K>'s accumulator
  std::size_t slot_floats;
  device_array<std::byte> bytes;
  explicit optimizer_arena(std::size_t slot_floats_)
      : slot_floats(slot_floats_), bytes((2 * floats + slot_count * slot_floats_) * sizeof(float)) {
    TYPEFLOW_CUDA_CHECK(cudaMemset(bytes.get(), 0, bytes.size));
  }
  float* weights() const { return reinterpret_cast<float*>(bytes.get()); }
  float* grads() const { return weights() + floats; }
  std::size_t gradients_offset() const { return floats * sizeof(float); }
  std::array<std::size_t, 8> slot_offsets() const {
    std::array<std::size_t, 8> offsets{};
    for (int s = 0; s < slot_count; ++s)
      offsets[static_cast<std::size_t>(s)] = (2 * floats + static_cast<std::size_t>(s) * slot_floats) * sizeof(float);
    return offsets;
  }
  std::vector<float> slot(int s) const {
    std::vector<float> host(slot_floats);
    TYPEFLOW_CUDA_CHECK(cudaMemcpy(host.data(), bytes.get() + slot_offsets()[static_cast<std::size_t>(s)],
                                   slot_floats * sizeof(float), cudaMemcpyDeviceToHost));
    return host;
  }
};

// The shards' measured statistics become the whole region's on every shard:
// the squared norms summed, all_finite the least (cuda_replicas::sum_statistics).
void sum_over_shards(const std::vector<cu::measured_statistics>& measured) {
  od::gradient_statistics total{0.0, 1, 0};
  std::vector<double> norms(measured[0].tensors, 0.0);
  for (const auto& m : measured) {
    const od::gradient_statistics own = read_device(m.statistics);
    total.squared_norm += own.squared_norm;
    total.all_finite = std::min(total.all_finite, own.all_finite);
    std::vector<double> own_norms(m.tensors);
    TYPEFLOW_CUDA_CHECK(cudaMemcpy(own_norms.data(), m.tensor_squared_norms, m.tensors * sizeof(double),
                                   cudaMemcpyDeviceToHost));
    for (std::size_t t = 0; t < norms.size(); ++t) norms[t] += own_norms[t];
  }
  for (const auto& m : measured) {
    cu::copy_to_device(m.statistics, &total, sizeof total);
    cu::copy_to_device(m.tensor_squared_norms, norms.data(), norms.size() * sizeof(double));
  }
}

// Three steps of `o` over the whole region and over `shards` shards; the
// shards' weights (gathered) and slots against the whole region's: the same
// per-element arithmetic, so the same values up to the device's fused
// multiply-adds (`limit`, relative) and the summed norms' last bits.
template <class O>
void check_sharded(const O& o, int shards, int slots, double limit) {
  CAPTURE(shards);
  std::mt19937 gen(17);
  const auto tensors = scenario_tensors();
  const std::vector<float> w0 = random_vector(gen, floats, 0.5f);
  const std::vector<std::size_t> cut = tf::shard_bounds(floats, shards);
  const od::step_state initial = od::make_step_state();
  optimizer_arena whole(floats);
  auto whole_optimizer = cu::make_device_optimizer(o, tensors, floats, initial);
  std::vector<optimizer_arena> arenas;
  std::vector<std::unique_ptr<cu::device_optimizer_base>> sharded;
  for (int r = 0; r < shards; ++r) {
    arenas.emplace_back(tf::shard_length(floats, shards));
    sharded.push_back(cu::make_device_optimizer(o, tensors, floats, initial, {cut[r], cut[r + 1]}));
  }
  cu::copy_to_device(whole.weights(), w0.data(), floats * sizeof(float));
  for (auto& a : arenas) cu::copy_to_device(a.weights(), w0.data(), floats * sizeof(float));
  cu::stream s;
  const int passes = whole_optimizer->update_passes();
  for (int step = 0; step < 4; ++step) {
    const std::vector<float> g = random_vector(gen, floats, 0.05f);
    cu::copy_to_device(whole.grads(), g.data(), floats * sizeof(float));
    for (auto& a : arenas) cu::copy_to_device(a.grads(), g.data(), floats * sizeof(float));
    whole_optimizer->prepare(step + 1, s.get());
    for (auto& opt_r : sharded) opt_r->prepare(step + 1, s.get());
    for (int pass = 0; pass < passes; ++pass) {
      whole_optimizer->record_pass(pass, whole.bytes.get(), whole.gradients_offset(), whole.slot_offsets(), s.get(),
                                   nullptr);
      std::vector<cu::measured_statistics> measured;
      for (int r = 0; r < shards; ++r)
        measured.push_back(sharded[static_cast<std::size_t>(r)]->record_pass(
            pass, arenas[static_cast<std::size_t>(r)].bytes.get(), arenas[static_cast<std::size_t>(r)].gradients_offset(),
            arenas[static_cast<std::size_t>(r)].slot_offsets(), s.get(), nullptr));
      s.synchronize();
      if (pass + 1 < passes) sum_over_shards(measured);
    }
    // The all-gather: each owner's shard of the weights to every arena.
    for (int owner = 0; owner < shards; ++owner)
      for (int r = 0; r < shards; ++r)
        if (r != owner)
          TYPEFLOW_CUDA_CHECK(cudaMemcpy(arenas[static_cast<std::size_t>(r)].weights() + cut[owner],
                                         arenas[static_cast<std::size_t>(owner)].weights() + cut[owner],
                                         (cut[owner + 1] - cut[owner]) * sizeof(float), cudaMemcpyDeviceToDevice));
  }
  s.synchronize();
  std::size_t beyond = 0;
  const auto compare = [&](const float* a, const float* b, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) beyond += std::abs(double{a[i]} - b[i]) > limit * std::abs(double{b[i]}) + 1e-9;
  };
  std::vector<float> expected(floats), got(floats);
  TYPEFLOW_CUDA_CHECK(cudaMemcpy(expected.data(), whole.weights(), floats * sizeof(float), cudaMemcpyDeviceToHost));
  for (auto& a : arenas) {
    TYPEFLOW_CUDA_CHECK(cudaMemcpy(got.data(), a.weights(), floats * sizeof(float), cudaMemcpyDeviceToHost));
    compare(got.data(), expected.data(), floats);
  }
  for (int k = 0; k < slots; ++k) {
    const std::vector<float> reference = whole.slot(k);
    for (int r = 0; r < shards; ++r) {
      const std::vector<float> own = arenas[static_cast<std::size_t>(r)].slot(k);
      compare(own.data(), reference.data() + cut[r], cut[r + 1] - cut[r]);
    }
  }
  CHECK(beyond == 0);
  CHECK(read_device(sharded.back()->state()).iterations == read_device(whole_optimizer->state()).iterations);
}

}  // namespace

TEST_CASE("zero<k>'s device optimizer: shards updated pass by pass with summed statistics give the whole region's") {
  for (int shards : {2, 3}) {
    check_sharded(opt::adamw{.learning_rate = 0.01, .weight_decay = 0.05f}, shards, 2, 1e-6);
    // Clipping reads the summed norm: its last bits may differ from one sum.
    check_sharded(opt::adamw{.learning_rate = 0.01, .global_clipnorm = 1.f}, shards, 2, 1e-5);
    // accumulate<2>: three passes, the accumulator sharded too.
    check_sharded(opt::accumulate<2>(opt::adam{.learning_rate = 0.01}), shards, 3, 1e-6);
  }
}

// The plain C++ the CUDA kernels are built from, checked on the CPU against
// the CPU paths: the vector split of the element-wise kernels, dropout's mask
// (against the dropout layer itself), and the optimizer step as the device
// runs it (chunk plan, statistics, clip, decay, rules, step tables, the
// loss-scale state) against each optimizer's update() and loss_scale.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "typeflow/backend/cuda/vector_plan.hpp"
#include "typeflow/backend/cpu/dropout.hpp"
#include "typeflow/layers/dropout_mask.hpp"
#include "typeflow/optimizers/device_update.hpp"
#include "typeflow/precision/loss_scale.hpp"

namespace tf = typeflow;
namespace opt = typeflow::optimizers;
namespace od = typeflow::optimizers::device;
using tf::backend::cuda::pointer_alignment;
using tf::backend::cuda::vector_plan;

// ---------------------------------------------------------------------------
// The element-wise kernels' split.

namespace {
// Every element exactly once; every vector 16-byte aligned in every pointer.
void check_plan(const vector_plan& p, std::size_t n, std::initializer_list<pointer_alignment> pointers) {
  REQUIRE(p.head + p.vectors * p.width + p.tail == n);
  std::vector<int> seen(n, 0);
  for (std::size_t v = 0; v < p.vectors; ++v) {
    const std::size_t e = p.vector_index(v);
    for (const auto& q : pointers) REQUIRE((q.address + e * q.element_bytes) % 16 == 0);
    for (std::size_t k = 0; k < p.width; ++k) ++seen[e + k];
  }
  for (std::size_t j = 0; j < p.scalars(); ++j) ++seen[p.scalar_index(j)];
  for (std::size_t i = 0; i < n; ++i) REQUIRE(seen[i] == 1);
  CHECK(p.items() == std::max(p.vectors, p.scalars()));
}
}  // namespace

TEST_CASE("split_vectorised covers every element once, with vectors aligned for every pointer") {
  const std::size_t sizes[] = {0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 1023, (1u << 12) + 3};
  for (std::size_t n : sizes) {
    for (std::uintptr_t a = 0; a < 16; a += 4)
      for (std::uintptr_t b = 0; b < 16; b += 4) {
        const std::uintptr_t pa = 0x1000 + a, pb = 0x2000 + b;
        const auto p = tf::backend::cuda::split_vectorised(n, 4, {{pa, 4}, {pb, 4}});
        check_plan(p, n, {{pa, 4}, {pb, 4}});
        if (a != b) CHECK(p.vectors == 0);  // misaligned differently: all scalar
        if (a == b && n >= 8) CHECK(p.head == (16 - a) % 16 / 4);
        CHECK(p.tail < 4);
      }
    // float in, 16 bits out: 8 elements per step, two float4 loads, one 16-byte store.
    for (std::uintptr_t a = 0; a < 16; a += 4)
      for (std::uintptr_t b = 0; b < 16; b += 2) {
        const std::uintptr_t pa = 0x1000 + a, pb = 0x3000 + b;
        const auto p = tf::backend::cuda::split_vectorised(n, 8, {{pa, 4}, {pb, 2}});
        check_plan(p, n, {{pa, 4}, {pb, 2}});
        if (p.vectors > 0) CHECK(p.head < 8);
      }
    // A pointer off its own element alignment: nothing vectorises.
    const auto odd = tf::backend::cuda::split_vectorised(n, 4, {{0x1001, 4}});
    CHECK(odd.head == n);
    CHECK(odd.vectors == 0);
  }
  constexpr auto p = tf::backend::cuda::split_vectorised(10, 4, {{0x1004, 4}, {0x2004, 4}});
  static_assert(p.head == 3 && p.vectors == 1 && p.tail == 3);
}

TEST_CASE("split_from peels up to the next multiple of the width inside a region") {
  for (std::size_t begin = 0; begin < 12; ++begin)
    for (std::size_t n = 0; n < 40; ++n) {
      const vector_plan p = tf::backend::cuda::split_from(begin, n, 4);
      REQUIRE(p.head + p.vectors * 4 + p.tail == n);
      if (p.vectors) REQUIRE((begin + p.head) % 4 == 0);
      REQUIRE(p.head < 4 + (p.vectors == 0 ? n : 0));
    }
}

// ---------------------------------------------------------------------------
// Dropout's mask.

namespace {
template <float Rate, class Context, int Batch, std::size_t Size>
void check_dropout_mask(std::uint64_t seed, std::uint64_t step) {
  using layer = typename tf::dropout<Rate>::template bind<tf::shape<Size>, Context>;
  constexpr std::size_t count = Batch * Size;
  std::vector<float> in(count), out(count), grad(count);
  std::vector<std::byte> keep(layer::workspace_bytes_per_sample * Batch);
  std::mt19937 gen(static_cast<unsigned>(seed * 7 + step));
  std::normal_distribution<float> normal;
  for (auto& x : in) x = normal(gen);
  for (auto& g : grad) g = normal(gen);
  const std::vector<float> dy = grad;
  tf::run_state run{.training = true, .seed = seed, .step = step};
  tf::layer_io<tf::cpu> io;
  io.in = in.data();
  io.out = out.data();
  io.d_in = grad.data();
  io.d_out = grad.data();
  io.workspace = keep.data();
  io.run = &run;
  tf::executor<tf::dropout<Rate>, layer, Batch, tf::cpu> dropout(io);
  dropout.forward();
  dropout.backward();

  const tf::dropout_mask mask = tf::make_dropout_mask(tf::dropout_seed(seed, Context::salt), step, Rate);
  CHECK(mask.scale == 1.f / (1.f - Rate));
  std::size_t mismatches = 0, kept = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const bool k = mask.keep(i);
    kept += k;
    mismatches += static_cast<std::uint8_t>(keep[i]) != k;
    // What the kernels compute, bit for bit.
    mismatches += std::bit_cast<std::uint32_t>(out[i]) != std::bit_cast<std::uint32_t>(k ? in[i] * mask.scale : 0.f);
    mismatches += std::bit_cast<std::uint32_t>(grad[i]) != std::bit_cast<std::uint32_t>(k ? dy[i] * mask.scale : 0.f);
  }
  CHECK(mismatches == 0);
  for (std::uint64_t b = 0; b < count / 4; ++b) {  // the kernels' four-at-a-time draw
    bool k4[4];
    mask.keep4(b, k4);
    for (int j = 0; j < 4; ++j) REQUIRE(k4[j] == mask.keep(4 * b + j));
  }
  CHECK(static_cast<double>(kept) == doctest::Approx((1.0 - Rate) * count).epsilon(0.05));
}
}  // namespace

TEST_CASE("dropout_mask draws the dropout layer's mask, tails and nested salts included") {
  check_dropout_mask<0.3f, tf::layer_context<2, void, void>, 3, 1001>(11, 1);
  check_dropout_mask<0.3f, tf::layer_context<2, void, void>, 3, 1001>(11, 2);
  check_dropout_mask<0.5f, tf::layer_context<5, void, void>, 2, 999>(12345, 77);
  check_dropout_mask<0.1f, tf::layer_context<1, void, void>, 1, 4099>(0, 1);
  using outer = tf::layer_context<3, void, void>;
  check_dropout_mask<0.25f, tf::nested_context<outer, void, void, 2>, 4, 257>(99, 5);
  // The integer threshold is exactly uniform(i) >= rate (the layer's tail test).
  for (float rate : {0.1f, 0.3f, 1.f / 3.f, 0.5f, 0.999f}) {
    const tf::dropout_mask mask = tf::make_dropout_mask(tf::dropout_seed(5, 1), 3, rate);
    for (std::uint64_t i = 0; i < 4000; ++i) REQUIRE(mask.keep(i) == (mask.rng.uniform(i) >= rate));
  }
}

// ---------------------------------------------------------------------------
// The optimizer's plan.

namespace {
// Tensors of every kind, out of offset order, with padding between them.
std::vector<opt::parameter_tensor> scenario_tensors() {
  using k = tf::param_kind;
  return {{688, 300, k::kernel}, {0, 300, k::kernel}, {304, 10, k::bias},   {320, 16, k::statistic},
          {400, 200, k::embedding}, {608, 64, k::scale}, {672, 13, k::offset}};
}
constexpr std::size_t scenario_floats = 1000;
}  // namespace

TEST_CASE("make_update_plan cuts the region into chunks inside one tensor or one gap, covering it once") {
  const auto tensors = scenario_tensors();
  for (std::uint32_t chunk_floats : {1u, 7u, 64u, 8192u}) {
    const od::update_plan plan = od::make_update_plan(tensors, scenario_floats, opt::decay_scope::kernels, chunk_floats);
    REQUIRE(plan.tensors.size() == tensors.size());
    std::uint64_t at = 0;
    for (const od::chunk& c : plan.chunks) {
      REQUIRE(c.begin == at);
      REQUIRE(c.length >= 1);
      REQUIRE(c.length <= chunk_floats);
      at += c.length;
      if (c.tensor >= 0) {
        const auto& t = tensors[c.tensor];
        REQUIRE(c.begin >= t.offset);
        REQUIRE(c.begin + c.length <= t.offset + t.size);
      } else {
        for (const auto& t : tensors) REQUIRE((c.begin + c.length <= t.offset || c.begin >= t.offset + t.size));
      }
    }
    CHECK(at == scenario_floats);
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const od::tensor_entry& e = plan.tensors[i];
      CHECK(e.offset == tensors[i].offset);
      CHECK(e.size == tensors[i].size);
      std::uint64_t covered = 0;
      for (std::uint32_t c = e.first_chunk; c < e.first_chunk + e.chunk_count; ++c) {
        REQUIRE(plan.chunks[c].tensor == static_cast<std::int32_t>(i));
        covered += plan.chunks[c].length;
      }
      CHECK(covered == e.size);
      CHECK(e.normed == (tensors[i].kind != tf::param_kind::statistic));
      CHECK(e.decays == opt::decays(opt::decay_scope::kernels, tensors[i].kind));
    }
  }
  std::vector<opt::parameter_tensor> overlapping = {{0, 10, tf::param_kind::kernel}, {8, 4, tf::param_kind::bias}};
  CHECK_THROWS_AS(od::make_update_plan(overlapping, 20, opt::decay_scope::all), std::invalid_argument);
  std::vector<opt::parameter_tensor> outside = {{16, 8, tf::param_kind::kernel}};
  CHECK_THROWS_AS(od::make_update_plan(outside, 20, opt::decay_scope::all), std::invalid_argument);
  const od::update_plan empty = od::make_update_plan({}, 0, opt::decay_scope::all);
  CHECK(empty.chunks.empty());
}

// ---------------------------------------------------------------------------
// The device step, run on the host with the kernels' functions, against the
// CPU optimizers.

namespace {

struct host_statistics {
  od::gradient_statistics global;
  std::vector<double> tensor_squared_norms;
};

// statistics_chunks_kernel + statistics_finish_kernel, sequentially.
host_statistics device_statistics(const od::update_plan& plan, std::vector<float>& grads, const od::step_state* state) {
  const float inverse = state ? state->inverse_loss_scale : 1.f;
  std::vector<double> partial(plan.chunks.size());
  int bad = 0;
  for (std::size_t c = 0; c < plan.chunks.size(); ++c) {
    const od::chunk& ch = plan.chunks[c];
    double sum = 0;
    for (std::uint64_t i = ch.begin; i < ch.begin + ch.length; ++i) {
      bad |= !od::is_finite_bits(grads[i]);
      if (inverse != 1.f) grads[i] *= inverse;
      sum += double{grads[i]} * grads[i];
    }
    partial[c] = ch.tensor >= 0 && plan.tensors[ch.tensor].normed ? sum : 0.0;
  }
  host_statistics s;
  for (double p : partial) s.global.squared_norm += p;
  s.global.all_finite = bad == 0;
  for (const od::tensor_entry& e : plan.tensors) {
    double sum = 0;
    for (std::uint32_t c = e.first_chunk; c < e.first_chunk + e.chunk_count; ++c) sum += partial[c];
    s.tensor_squared_norms.push_back(sum);
  }
  return s;
}

// apply_update_kernel, sequentially; returns whether it changed anything.
template <class Rule>
bool device_apply(const od::update_plan& plan, std::vector<float>& w, const std::vector<float>& g,
                  std::vector<std::vector<float>>& slots, od::clip_options clip, const host_statistics& stats,
                  const od::step_state& state, const od::step_table<Rule>& table) {
  if (!od::update_applies(state, stats.global.all_finite)) return false;
  const od::step_values<Rule>* values = table.find(state.iterations + 1);
  if (!values) return false;
  const float global_factor =
      clip.kind == od::clip_kind::global_norm ? od::norm_clip_factor(stats.global.squared_norm, clip.limit) : 1.f;
  for (const od::chunk& ch : plan.chunks) {
    bool decays = false;
    float factor = clip.kind == od::clip_kind::norm ? 1.f : global_factor;
    if (ch.tensor >= 0) {
      decays = plan.tensors[ch.tensor].decays;
      if (clip.kind == od::clip_kind::norm && plan.tensors[ch.tensor].normed)
        factor = od::norm_clip_factor(stats.tensor_squared_norms[ch.tensor], clip.limit);
    }
    for (std::uint64_t i = ch.begin; i < ch.begin + ch.length; ++i) {
      float s[3] = {};
      for (int k = 0; k < values->rule.slots(); ++k) s[k] = slots[k][i];
      od::update_element(w[i], g[i], s, *values, clip.kind, clip.limit, factor, decays);
      for (int k = 0; k < values->rule.slots(); ++k) slots[k][i] = s[k];
    }
  }
  return true;
}

struct run_result {
  std::vector<float> weights;
  std::vector<std::vector<float>> slots;
};

std::vector<float> random_vector(std::mt19937& gen, std::size_t n, float spread) {
  std::normal_distribution<float> normal(0.f, spread);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(gen);
  return v;
}

// Three steps of the CPU optimizer on fixed data.
template <class O>
run_result run_cpu(const O& o, const std::vector<opt::parameter_tensor>& tensors, std::vector<float> weights,
                   const std::vector<std::vector<float>>& step_grads) {
  run_result r{std::move(weights), std::vector<std::vector<float>>(o.slot_count(), std::vector<float>(scenario_floats, 0.f))};
  std::vector<float*> slot_pointers;
  for (auto& s : r.slots) slot_pointers.push_back(s.data());
  for (std::size_t step = 0; step < step_grads.size(); ++step) {
    std::vector<float> g = step_grads[step];
    opt::update_arguments a;
    a.weights = r.weights.data();
    a.grads = g.data();
    a.slots = slot_pointers.data();
    a.floats = static_cast<std::ptrdiff_t>(scenario_floats);
    a.tensors = tensors;
    a.iteration = static_cast<std::int64_t>(step) + 1;
    o.update(a);
  }
  return r;
}

// The same three steps the device's way: statistics, apply, finish.
template <class O>
run_result run_device(const O& o, const std::vector<opt::parameter_tensor>& tensors, std::vector<float> weights,
                      const std::vector<std::vector<float>>& step_grads, std::uint32_t chunk_floats) {
  const od::update_plan plan = od::make_update_plan(tensors, scenario_floats, o.weight_decay_applies_to, chunk_floats);
  run_result r{std::move(weights), std::vector<std::vector<float>>(o.slot_count(), std::vector<float>(scenario_floats, 0.f))};
  od::step_state state = od::make_step_state();
  for (const auto& grads : step_grads) {
    std::vector<float> g = grads;
    const host_statistics stats = device_statistics(plan, g, &state);
    const auto table = od::step_table_for(o, state.iterations + 1, 1);
    const bool applied = device_apply(plan, r.weights, g, r.slots, od::clip_options_of(o), stats, state, table);
    od::finish_step(state, stats.global.all_finite, applied);
  }
  CHECK(state.iterations == static_cast<std::int64_t>(step_grads.size()));
  return r;
}

template <class O>
void check_same_as_cpu(O o, const char* what) {
  const auto tensors = scenario_tensors();
  std::mt19937 gen(2024);
  const std::vector<float> weights = random_vector(gen, scenario_floats, 0.5f);
  std::vector<std::vector<float>> grads;
  for (int step = 0; step < 3; ++step) grads.push_back(random_vector(gen, scenario_floats, 0.3f));
  struct clip_case {
    const char* name;
    std::optional<float> clipnorm, clipvalue, global_clipnorm;
  };
  // Limits that clip some tensors and not others (norms here run 0.3 .. 5).
  const clip_case clips[] = {{"none", {}, {}, {}}, {"clipnorm", 2.f, {}, {}}, {"clipvalue", {}, 0.25f, {}},
                             {"global_clipnorm", {}, {}, 4.f}, {"global_clipnorm above the norm", {}, {}, 100.f}};
  for (const clip_case& c : clips) {
    const std::string label = std::string(what) + ", " + c.name;
    CAPTURE(label);
    o.clipnorm = c.clipnorm;
    o.clipvalue = c.clipvalue;
    o.global_clipnorm = c.global_clipnorm;
    o.validate();
    const run_result cpu = run_cpu(o, tensors, weights, grads);
    for (std::uint32_t chunk_floats : {64u, od::default_chunk_floats}) {
      const run_result device = run_device(o, tensors, weights, grads, chunk_floats);
      // The same float operations in the same order: equal (they are, at
      // -O1), up to the roundings a multiply-add fused on one side only
      // changes (-O3 -march=native fuses some), relative to the terms' size.
      std::size_t beyond = 0;
      auto compare = [&](const std::vector<float>& a, const std::vector<float>& b) {
        for (std::size_t i = 0; i < a.size(); ++i) beyond += std::abs(double{a[i]} - b[i]) > 1e-6 * std::abs(double{b[i]}) + 1e-7;
      };
      compare(cpu.weights, device.weights);
      for (std::size_t k = 0; k < cpu.slots.size(); ++k) compare(cpu.slots[k], device.slots[k]);
      CHECK(beyond == 0);
    }
  }
}

}  // namespace

TEST_CASE("the device step equals each CPU optimizer over three steps, with every kind of clipping") {
  check_same_as_cpu(opt::adam{.learning_rate = 0.01}, "adam");
  check_same_as_cpu(opt::adam{.learning_rate = 0.01, .amsgrad = true, .weight_decay = 0.1f}, "adam amsgrad, decay");
  check_same_as_cpu(opt::adamw{.learning_rate = 0.01, .weight_decay = 0.05f}, "adamw");
  check_same_as_cpu(opt::sgd{.learning_rate = 0.1}, "sgd");
  check_same_as_cpu(opt::sgd{.learning_rate = 0.1, .momentum = 0.9f, .weight_decay = 0.01f}, "sgd momentum");
  check_same_as_cpu(opt::sgd{.learning_rate = 0.1, .momentum = 0.9f, .nesterov = true}, "sgd nesterov");
  check_same_as_cpu(opt::lion{.learning_rate = 0.001, .weight_decay = 0.1f}, "lion");
  check_same_as_cpu(opt::rmsprop{.learning_rate = 0.01}, "rmsprop");
  check_same_as_cpu(opt::rmsprop{.learning_rate = 0.01, .momentum = 0.5f}, "rmsprop momentum");
  check_same_as_cpu(opt::rmsprop{.learning_rate = 0.01, .centered = true}, "rmsprop centered");
  check_same_as_cpu(opt::rmsprop{.learning_rate = 0.01, .momentum = 0.5f, .centered = true, .weight_decay = 0.02f},
                    "rmsprop momentum centered decay");
  check_same_as_cpu(opt::adamw{.learning_rate = tf::schedules::cosine_decay{0.01, 3}, .weight_decay = 0.05f},
                    "adamw, cosine schedule");
}

TEST_CASE("clip and decay factors are update.hpp's") {
  // clip_gradients: scale by float(limit / norm) only above the limit.
  for (double squared : {0.0, 0.25, 3.9999, 4.0, 4.0001, 17.0, 1e10}) {
    const float limit = 2.f;
    const double norm = std::sqrt(squared);
    const float expected = norm > limit ? static_cast<float>(limit / norm) : 1.f;
    CHECK(od::norm_clip_factor(squared, limit) == expected);
  }
  CHECK(od::norm_clip_factor(std::numeric_limits<double>::quiet_NaN(), 1.f) == 1.f);  // as the CPU: no clip
  CHECK(od::clip_gradient(3.f, od::clip_kind::value, 1.f, 1.f) == 1.f);
  CHECK(od::clip_gradient(-3.f, od::clip_kind::value, 1.f, 1.f) == -1.f);
  CHECK(od::clip_gradient(0.5f, od::clip_kind::value, 1.f, 1.f) == 0.5f);
  CHECK(od::clip_gradient(0.5f, od::clip_kind::global_norm, 1.f, 0.25f) == 0.125f);
  CHECK(od::decay_factor(0.01, 0.f) == 1.f);
  CHECK(od::decay_factor(0.01, 0.004f) == static_cast<float>(1.0 - 0.01 * 0.004f));
  CHECK(od::decay_weight(2.f, true, 0.5f) == 1.f);
  CHECK(od::decay_weight(2.f, false, 0.5f) == 2.f);
  CHECK(od::is_finite_bits(std::numeric_limits<float>::max()));
  CHECK(od::is_finite_bits(std::numeric_limits<float>::denorm_min()));
  CHECK_FALSE(od::is_finite_bits(std::numeric_limits<float>::infinity()));
  CHECK_FALSE(od::is_finite_bits(-std::numeric_limits<float>::infinity()));
  CHECK_FALSE(od::is_finite_bits(std::numeric_limits<float>::quiet_NaN()));
}

TEST_CASE("the statistics pass unscales and flags like precision::unscale_all_finite") {
  const auto tensors = scenario_tensors();
  const od::update_plan plan = od::make_update_plan(tensors, scenario_floats, opt::decay_scope::all, 64);
  std::mt19937 gen(7);
  for (int bad_at : {-1, 0, 305, 999}) {
    std::vector<float> g = random_vector(gen, scenario_floats, 1000.f);
    if (bad_at >= 0) g[bad_at] = bad_at % 2 ? std::numeric_limits<float>::infinity() : std::nanf("");
    std::vector<float> cpu = g;
    const bool finite = tf::precision::unscale_all_finite(cpu.data(), cpu.size(), 1024.f);
    od::step_state state = od::make_step_state(tf::precision::fixed_loss_scale{1024.f});
    const host_statistics s = device_statistics(plan, g, &state);
    CHECK(static_cast<bool>(s.global.all_finite) == finite);
    for (std::size_t i = 0; i < g.size(); ++i)
      REQUIRE(std::bit_cast<std::uint32_t>(g[i]) == std::bit_cast<std::uint32_t>(cpu[i]));
    if (finite) {  // the norm clip_gradients would take: tensors that are not statistics
      double expected = 0;
      for (const auto& t : tensors)
        if (t.kind != tf::param_kind::statistic)
          for (std::size_t i = t.offset; i < t.offset + t.size; ++i) expected += double{cpu[i]} * cpu[i];
      CHECK(s.global.squared_norm == doctest::Approx(expected).epsilon(1e-12));
    }
  }
}

TEST_CASE("finish_step runs loss_scale's state machine and counts updates as train/model.hpp does") {
  std::mt19937 gen(3);
  std::bernoulli_distribution finite_draw(0.8);
  for (bool dynamic : {true, false}) {
    tf::precision::loss_scale cpu = dynamic ? tf::precision::loss_scale(tf::precision::dynamic_loss_scale{1024.f, 3})
                                            : tf::precision::loss_scale(tf::precision::fixed_loss_scale{8.f});
    od::step_state s = dynamic ? od::make_step_state(tf::precision::dynamic_loss_scale{1024.f, 3})
                               : od::make_step_state(tf::precision::fixed_loss_scale{8.f});
    std::int64_t iterations = 0;
    for (int step = 0; step < 500; ++step) {
      const bool finite = finite_draw(gen);
      REQUIRE(s.loss_scale == cpu.scale());
      REQUIRE(s.inverse_loss_scale == 1.f / cpu.scale());
      const bool applied = od::update_applies(s, finite);
      REQUIRE(applied == cpu.after_step(finite));
      iterations += applied;
      od::finish_step(s, finite, applied);
      REQUIRE(s.iterations == iterations);
      REQUIRE(s.steps == step + 1);
      REQUIRE(s.skipped == cpu.skipped_steps());
      REQUIRE(static_cast<bool>(s.last_applied) == applied);
    }
  }
  // float32: no loss scaling, a non-finite step is applied (no skip on the CPU either).
  od::step_state s = od::make_step_state();
  CHECK(od::update_applies(s, false));
  od::finish_step(s, false, true);
  CHECK(s.iterations == 1);
  CHECK(s.skipped == 0);
  CHECK(s.loss_scale == 1.f);
}

TEST_CASE("a step table holds each possible update number's values, as the optimizer computes them") {
  const opt::adamw o{.learning_rate = tf::schedules::cosine_decay{0.01, 10}, .weight_decay = 0.05f};
  const auto table = od::step_table_for(o, 4, 5);
  CHECK(table.find(3) == nullptr);
  CHECK(table.find(9) == nullptr);
  for (std::int64_t t = 4; t < 9; ++t) {
    const auto* v = table.find(t);
    REQUIRE(v != nullptr);
    const double lr = o.learning_rate(t - 1);
    const double correction = std::sqrt(1.0 - std::pow(double{o.beta_2}, double(t))) / (1.0 - std::pow(double{o.beta_1}, double(t)));
    CHECK(v->rule.rule.step_size == static_cast<float>(lr * correction));
    CHECK(v->decay_factor == static_cast<float>(1.0 - lr * o.weight_decay));
  }
  CHECK_THROWS_AS(od::step_table_for(o, 1, 0), std::invalid_argument);
  CHECK_THROWS_AS(od::step_table_for(o, 1, od::step_table_capacity + 1), std::invalid_argument);

  // Under loss scaling the device picks by its own count: a skipped step
  // leaves the next one the same number, as the CPU model does.
  const auto tensors = scenario_tensors();
  const od::update_plan plan = od::make_update_plan(tensors, scenario_floats, o.weight_decay_applies_to, 64);
  std::mt19937 gen(5);
  std::vector<float> w = random_vector(gen, scenario_floats, 0.5f), w_cpu = w;
  std::vector<std::vector<float>> slots(2, std::vector<float>(scenario_floats, 0.f)), slots_cpu = slots;
  float* slot_pointers[2] = {slots_cpu[0].data(), slots_cpu[1].data()};
  od::step_state state = od::make_step_state(tf::precision::dynamic_loss_scale{});
  tf::precision::loss_scale scale(tf::precision::dynamic_loss_scale{});
  std::int64_t cpu_iterations = 0;
  for (int step = 0; step < 6; ++step) {
    std::vector<float> g = random_vector(gen, scenario_floats, 0.1f);
    for (auto& x : g) x *= scale.scale();
    if (step == 1 || step == 2) g[17] = std::numeric_limits<float>::infinity();
    std::vector<float> g_cpu = g;
    // CPU: train/model.hpp's regularize_and_update.
    const bool finite = tf::precision::unscale_all_finite(g_cpu.data(), g_cpu.size(), scale.scale());
    if (scale.after_step(finite)) {
      opt::update_arguments a;
      a.weights = w_cpu.data();
      a.grads = g_cpu.data();
      a.slots = slot_pointers;
      a.floats = static_cast<std::ptrdiff_t>(scenario_floats);
      a.tensors = tensors;
      a.iteration = ++cpu_iterations;
      o.update(a);
    }
    // Device: the host does not know about the skips; the table covers them.
    const host_statistics stats = device_statistics(plan, g, &state);
    const auto steps_table = od::step_table_for(o, 1, step + 1);
    const bool applied = device_apply(plan, w, g, slots, od::clip_options_of(o), stats, state, steps_table);
    od::finish_step(state, stats.global.all_finite, applied);
    REQUIRE(state.iterations == cpu_iterations);
  }
  CHECK(state.skipped == 2);
  double worst = 0;
  for (std::size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(double{w[i]} - w_cpu[i]));
  CHECK(worst < 1e-6);
}

// What is device-specific in the plain C++ the CUDA kernels are built from,
// checked on the CPU: the vector split of the element-wise kernels, dropout's
// mask (against the dropout layer itself), and the optimizer step's layout:
// the chunk plan, the statistics pass's reduction order, step tables and the
// step state. The arithmetic per element (each optimizer's
// rule, clip, decay, update_element) and the loss-scale state machine are
// the CPU's own code (optimizers/element.hpp, precision/loss_scale.hpp), so
// nothing here compares two copies of them.
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
#include "typeflow/distribute/zero.hpp"
#include "typeflow/layers/dropout_mask.hpp"
#include "typeflow/optimizers/device_update.hpp"
#include "typeflow/optimizers/optimizers.hpp"
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
// salt: the executor's layer_io::salt (a network's layer I has I).
template <float Rate, int Batch, std::size_t Size>
void check_dropout_mask(std::uint64_t seed, std::uint64_t step, std::uint64_t salt) {
  using layer = typename tf::dropout<Rate>::template bind<tf::shape<Size>, tf::layer_context<1, void, void>>;
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
  io.salt = salt;
  tf::executor<tf::dropout<Rate>, layer, Batch, tf::cpu> dropout(io);
  dropout.forward();
  dropout.backward();

  const tf::dropout_mask mask = tf::make_dropout_mask(tf::dropout_seed(seed, salt), step, Rate);
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
  check_dropout_mask<0.3f, 3, 1001>(11, 1, 2);
  check_dropout_mask<0.3f, 3, 1001>(11, 2, 2);
  check_dropout_mask<0.5f, 2, 999>(12345, 77, 5);
  check_dropout_mask<0.1f, 1, 4099>(0, 1, 1);
  check_dropout_mask<0.25f, 4, 257>(99, 5, tf::child_salt(3, 2));  // child 2 of a combinator at layer 3
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
// The device step, run on the host: the kernels' reduction order and their
// walk over the chunks, with the shared per-element functions.

namespace {

struct host_statistics {
  od::gradient_statistics global;
  std::vector<double> tensor_squared_norms;
};

// statistics_chunks_kernel + statistics_finish_kernel, sequentially: a
// partial sum per chunk (0 for padding and statistics), the global sum over
// the chunks in order, each tensor's over its own chunks.
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

// apply_update_kernel, sequentially, for an optimizer without clipping (the
// GPU tests cover the kernel's clip factors): the skip, the step table's
// entry for the device's own update count, each chunk's decay, and
// update_element, each slot read at [i - slot_origin]. Returns whether it
// changed anything.
template <class Rule>
bool device_apply(const od::update_plan& plan, std::vector<float>& w, const std::vector<float>& g,
                  std::vector<std::vector<float>>& slots, const host_statistics& stats, const od::step_state& state,
                  const od::step_table<Rule>& table) {
  if (!od::update_applies(state, stats.global.all_finite)) return false;
  const opt::step_values<Rule>* values = table.find(state.iterations + 1);
  if (!values) return false;
  for (const od::chunk& ch : plan.chunks) {
    const bool decays = ch.tensor >= 0 && plan.tensors[ch.tensor].decays && values->decay_factor != 1.f;
    for (std::uint64_t i = ch.begin; i < ch.begin + ch.length; ++i) {
      float s[opt::max_slots] = {};
      for (int k = 0; k < values->rule.slots(); ++k) s[k] = slots[k][i - plan.slot_origin];
      opt::update_element(w[i], g[i], s, values->rule, opt::clip_kind::none, 0.f, 1.f, decays, values->decay_factor);
      for (int k = 0; k < values->rule.slots(); ++k) slots[k][i - plan.slot_origin] = s[k];
    }
  }
  return true;
}

std::vector<float> random_vector(std::mt19937& gen, std::size_t n, float spread) {
  std::normal_distribution<float> normal(0.f, spread);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(gen);
  return v;
}

opt::update_arguments arguments(std::vector<float>& w, std::vector<float>& g, std::vector<float*>& slots,
                                const std::vector<opt::parameter_tensor>& tensors, std::int64_t iteration) {
  opt::update_arguments a;
  a.weights = w.data();
  a.grads = g.data();
  a.slots = slots.data();
  a.floats = static_cast<std::ptrdiff_t>(scenario_floats);
  a.tensors = tensors;
  a.iteration = iteration;
  return a;
}

}  // namespace

TEST_CASE("the statistics pass unscales and flags like precision::unscale_all_finite, summing by chunks") {
  CHECK(od::is_finite_bits(std::numeric_limits<float>::max()));
  CHECK(od::is_finite_bits(std::numeric_limits<float>::denorm_min()));
  CHECK_FALSE(od::is_finite_bits(std::numeric_limits<float>::infinity()));
  CHECK_FALSE(od::is_finite_bits(-std::numeric_limits<float>::infinity()));
  CHECK_FALSE(od::is_finite_bits(std::numeric_limits<float>::quiet_NaN()));
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
    if (finite) {  // the norms apply_update takes: tensors that are not statistics
      double expected = 0;
      for (std::size_t t = 0; t < tensors.size(); ++t) {
        double sum = 0;
        if (tensors[t].kind != tf::param_kind::statistic)
          for (std::size_t i = tensors[t].offset; i < tensors[t].offset + tensors[t].size; ++i) sum += double{cpu[i]} * cpu[i];
        CHECK(s.tensor_squared_norms[t] == doctest::Approx(sum).epsilon(1e-12));
        expected += sum;
      }
      CHECK(s.global.squared_norm == doctest::Approx(expected).epsilon(1e-12));
    }
  }
}

// zero<k> on the device: each replica's optimizer walks a plan over its
// shard, its slots holding the shard alone, and the shards' statistics are
// summed between the passes (distribute/cuda_replicas.hpp). Replayed here:
// the shards' plans tile the whole plan's chunks, their statistics add up to
// the whole region's, and their updates give the whole plan's bits.
TEST_CASE("make_update_plan over zero<k>'s shards: chunks that tile the region, the whole plan's statistics and bits") {
  const auto tensors = scenario_tensors();
  const opt::adamw o{.learning_rate = 0.01, .weight_decay = 0.05f};
  const od::update_plan whole = od::make_update_plan(tensors, scenario_floats, o.weight_decay_applies_to, 64);
  CHECK_THROWS_AS(od::make_update_plan(tensors, scenario_floats, o.weight_decay_applies_to, 64, {600, 500}),
                  std::invalid_argument);
  std::mt19937 gen(11);
  for (int shards : {2, 3, 4}) {
    CAPTURE(shards);
    const std::vector<std::size_t> cut = tf::shard_bounds(scenario_floats, shards);
    std::vector<od::update_plan> plans;
    std::vector<std::uint64_t> tensor_floats(tensors.size(), 0);
    std::uint64_t at = 0;
    for (int r = 0; r < shards; ++r) {
      plans.push_back(
          od::make_update_plan(tensors, scenario_floats, o.weight_decay_applies_to, 64, {cut[r], cut[r + 1]}));
      const od::update_plan& plan = plans.back();
      CHECK(plan.slot_origin == cut[r]);
      REQUIRE(plan.tensors.size() == tensors.size());
      for (const od::chunk& c : plan.chunks) {  // the range, in order, each chunk inside one tensor or gap
        REQUIRE(c.begin == at);
        at += c.length;
        if (c.tensor >= 0) {
          REQUIRE(c.begin >= tensors[c.tensor].offset);
          REQUIRE(c.begin + c.length <= tensors[c.tensor].offset + tensors[c.tensor].size);
        }
      }
      REQUIRE(at == cut[r + 1]);
      for (std::size_t t = 0; t < tensors.size(); ++t) {
        const od::tensor_entry& e = plan.tensors[t];
        for (std::uint32_t c = e.first_chunk; c < e.first_chunk + e.chunk_count; ++c) {
          REQUIRE(plan.chunks[c].tensor == static_cast<std::int32_t>(t));
          tensor_floats[t] += plan.chunks[c].length;
        }
      }
    }
    CHECK(at == scenario_floats);
    for (std::size_t t = 0; t < tensors.size(); ++t) CHECK(tensor_floats[t] == tensors[t].size);

    // Three steps: the whole plan against the shards with their statistics summed.
    std::vector<float> w = random_vector(gen, scenario_floats, 0.5f), w_sharded = w;
    std::vector<std::vector<float>> slots(2, std::vector<float>(scenario_floats, 0.f));
    std::vector<std::vector<std::vector<float>>> shard_slots;
    for (int r = 0; r < shards; ++r)
      shard_slots.emplace_back(2, std::vector<float>(cut[r + 1] - cut[r], 0.f));
    od::step_state state = od::make_step_state(tf::precision::fixed_loss_scale{8.f});
    od::step_state sharded_state = state;
    for (int step = 0; step < 3; ++step) {
      std::vector<float> g = random_vector(gen, scenario_floats, 0.1f);
      if (step == 1) g[cut[shards - 1]] = std::numeric_limits<float>::infinity();  // in the last shard alone
      std::vector<float> g_sharded = g;
      const host_statistics stats = device_statistics(whole, g, &state);
      host_statistics summed{{0.0, 1, 0}, std::vector<double>(tensors.size(), 0.0)};
      for (int r = 0; r < shards; ++r) {
        const host_statistics own = device_statistics(plans[r], g_sharded, &sharded_state);
        summed.global.squared_norm += own.global.squared_norm;
        summed.global.all_finite = std::min(summed.global.all_finite, own.global.all_finite);
        for (std::size_t t = 0; t < tensors.size(); ++t) summed.tensor_squared_norms[t] += own.tensor_squared_norms[t];
      }
      CHECK(summed.global.all_finite == stats.global.all_finite);
      CHECK(summed.global.all_finite == (step != 1));
      if (stats.global.all_finite) {
        CHECK(summed.global.squared_norm == doctest::Approx(stats.global.squared_norm).epsilon(1e-12));
        for (std::size_t t = 0; t < tensors.size(); ++t)
          CHECK(summed.tensor_squared_norms[t] == doctest::Approx(stats.tensor_squared_norms[t]).epsilon(1e-12));
      }
      const auto table = od::step_table_for(o, state.iterations + 1, 1);
      const bool applied = device_apply(whole, w, g, slots, stats, state, table);
      for (int r = 0; r < shards; ++r)
        CHECK(device_apply(plans[r], w_sharded, g_sharded, shard_slots[r], summed, sharded_state, table) == applied);
      od::finish_step(state, stats.global.all_finite, applied);
      od::finish_step(sharded_state, summed.global.all_finite, applied);
    }
    CHECK(state.iterations == 2);
    CHECK(sharded_state.iterations == state.iterations);
    CHECK(std::memcmp(w.data(), w_sharded.data(), w.size() * sizeof(float)) == 0);
    for (int r = 0; r < shards; ++r)
      for (int k = 0; k < 2; ++k)
        CHECK(std::memcmp(shard_slots[r][k].data(), slots[k].data() + cut[r],
                          shard_slots[r][k].size() * sizeof(float)) == 0);
  }
}

TEST_CASE("finish_step moves precision::loss_scale's state and counts updates as train/model.hpp does") {
  std::mt19937 gen(3);
  std::bernoulli_distribution finite_draw(0.8);
  for (bool dynamic : {true, false}) {
    tf::precision::loss_scale cpu = dynamic ? tf::precision::loss_scale(tf::precision::dynamic_loss_scale{1024.f, 3})
                                            : tf::precision::loss_scale(tf::precision::fixed_loss_scale{8.f});
    od::step_state s = dynamic ? od::make_step_state(tf::precision::dynamic_loss_scale{1024.f, 3})
                               : od::make_step_state(tf::precision::fixed_loss_scale{8.f});
    std::int64_t iterations = 0;
    for (int step = 0; step < 200; ++step) {
      const bool finite = finite_draw(gen);
      REQUIRE(s.loss_scale == cpu.scale());
      REQUIRE(s.inverse_loss_scale == 1.f / cpu.scale());  // what the statistics pass multiplies by
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
  CHECK_THROWS_AS(od::make_step_state(tf::precision::dynamic_loss_scale{0.f}), std::invalid_argument);
  // float32: no loss scaling. A step whose gradients are not all updatable
  // is not applied either (the CPU's NaN policy stops before its update),
  // and last_finite tells the engine to stop training; no scale moves.
  od::step_state s = od::make_step_state();
  CHECK(!od::update_applies(s, false));
  od::finish_step(s, false, od::update_applies(s, false));
  CHECK(s.iterations == 0);
  CHECK(s.last_finite == 0);
  CHECK(s.skipped == 0);
  CHECK(s.loss_scale == 1.f);
  CHECK(s.inverse_loss_scale == 1.f);
  CHECK(od::update_applies(s, true));
  od::finish_step(s, true, true);
  CHECK(s.iterations == 1);
  CHECK(s.last_finite == 1);
}

TEST_CASE("the device's NaN-policy test is the CPU's optimizers::updatable, value for value") {
  const float two_60 = 1152921504606846976.f;
  const float values[] = {0.f, -0.f, 1e-45f, 1.f, -3.5f, 1e30f, -1e30f, two_60, -two_60,
                          std::nextafter(two_60, 0.f), std::nextafter(two_60, 3e38f), -std::nextafter(two_60, 3e38f),
                          3.4e38f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()};
  for (float v : values) {
    CAPTURE(v);
    CHECK(od::updatable_bits(v) == opt::updatable(v));
  }
  CHECK(od::updatable_bits(two_60));
  CHECK(!od::updatable_bits(std::nextafter(two_60, 3e38f)));
}

TEST_CASE("a step table holds each possible update number's values, as the optimizer computes them") {
  const opt::adamw o{.learning_rate = tf::schedules::cosine_decay{0.01, 10}, .weight_decay = 0.05f};
  const auto table = od::step_table_for(o, 4, 5);
  CHECK(table.find(3) == nullptr);
  CHECK(table.find(9) == nullptr);
  for (std::int64_t t = 4; t < 9; ++t) {
    const auto* v = table.find(t);
    REQUIRE(v != nullptr);
    const auto expected = o.rule(t);  // apply_update's rule of update t
    CHECK(v->rule.step_size == expected.step_size);
    CHECK(v->rule.beta_1 == expected.beta_1);
    CHECK(v->rule.beta_2 == expected.beta_2);
    CHECK(v->rule.epsilon == expected.epsilon);
    CHECK(v->rule.amsgrad == expected.amsgrad);
    CHECK(v->decay_factor == static_cast<float>(1.0 - o.learning_rate(t - 1) * o.weight_decay));
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
  std::vector<float*> slot_pointers = {slots_cpu[0].data(), slots_cpu[1].data()};
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
    if (scale.after_step(finite)) o.update(arguments(w_cpu, g_cpu, slot_pointers, tensors, ++cpu_iterations));
    // Device: the host does not know about the skips; the table covers them.
    const host_statistics stats = device_statistics(plan, g, &state);
    const auto steps_table = od::step_table_for(o, 1, step + 1);
    const bool applied = device_apply(plan, w, g, slots, stats, state, steps_table);
    od::finish_step(state, stats.global.all_finite, applied);
    REQUIRE(state.iterations == cpu_iterations);
  }
  CHECK(state.skipped == 2);
  // The same functions on the same values, decayed by the plan's chunks. Not
  // always the same bits: g++ fuses multiply-adds inside a rule differently
  // in a vectorised loop and in this scalar one.
  std::size_t beyond = 0;
  auto compare = [&](const std::vector<float>& a, const std::vector<float>& b) {
    for (std::size_t i = 0; i < a.size(); ++i) beyond += std::abs(double{a[i]} - b[i]) > 1e-6 * std::abs(double{b[i]}) + 1e-9;
  };
  compare(w, w_cpu);
  for (std::size_t k = 0; k < slots.size(); ++k) compare(slots[k], slots_cpu[k]);
  CHECK(beyond == 0);
}

// ---------------------------------------------------------------------------
// accumulate<K> on the device: begin_accumulation's decisions and
// accumulate_element's arithmetic, replayed step by step against the CPU's
// accumulate_and_update (the same accumulator and mean gradients, to the
// bit, and an update on exactly the same steps), with loss scaling's skipped
// steps adding nothing.

TEST_CASE("accumulate<K> on the device: the CPU's accumulator, mean gradients and update steps") {
  constexpr int K = 3;
  constexpr std::size_t n = 37;
  const std::vector<opt::parameter_tensor> tensors{{0, n, tf::param_kind::kernel}};
  auto cpu = opt::accumulate<K>(opt::sgd{.learning_rate = 0.5});
  std::vector<float> cpu_weights(n, 1.f), cpu_sum(n, 0.f), gpu_sum(n, 0.f);
  float* cpu_slots[] = {cpu_sum.data()};
  od::step_state state = od::make_step_state(tf::precision::dynamic_loss_scale{});
  state.micro_batches_per_update = K;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  // Steps 3 and 7 overflow under loss scaling: the CPU skips the optimizer then.
  const bool finite[] = {true, true, true, false, true, true, true, false, true, true, true};
  int updates = 0;
  for (bool ok : finite) {
    std::vector<float> g(n);
    for (float& v : g) v = dist(rng);
    std::vector<float> cpu_g = g, gpu_g = g;
    bool cpu_updated = false;
    if (ok) {
      opt::update_arguments a;
      a.weights = cpu_weights.data();
      a.grads = cpu_g.data();
      a.slots = cpu_slots;
      a.floats = static_cast<std::ptrdiff_t>(n);
      a.tensors = tensors;
      a.iteration = updates + 1;
      cpu_updated = cpu.accumulate_and_update(a);
    }
    od::begin_accumulation(state, ok);
    for (std::size_t i = 0; i < n; ++i)
      gpu_g[i] = od::accumulate_element(gpu_sum[i], gpu_g[i], state.accumulate_mode, 1.f / K);
    CHECK(od::update_applies(state, ok) == cpu_updated);
    CHECK(std::memcmp(gpu_sum.data(), cpu_sum.data(), n * sizeof(float)) == 0);
    if (cpu_updated) {
      CHECK(std::memcmp(gpu_g.data(), cpu_g.data(), n * sizeof(float)) == 0);  // the mean the update reads
      ++updates;
    }
    CHECK(state.micro_batches == cpu.micro_batches);
    od::finish_step(state, ok, od::update_applies(state, ok));
  }
  CHECK(updates == 3);  // 9 finite micro-batches
  CHECK(state.iterations == 3);
}

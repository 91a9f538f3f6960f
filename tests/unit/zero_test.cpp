// zero<k, mirrored<N>>: replicas that each keep a shard of the optimizer's
// slots (k = 1), of the mean gradient (k = 2) and of the weights, gathered
// layer by layer (k = 3), train to mirrored<N>'s weights and slots, bit for
// bit (global_clipnorm under zero<2|3>: to its stated tolerance); each
// replica's bytes are the hand-computed ones, and under zero<3> the pages it
// holds are measured; and checkpoints cross between sharded and unsharded
// models and replica counts.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <typeflow/typeflow.hpp>

#include "../support/resume_fixture.hpp"
#include "../support/test_support.hpp"

namespace tf = typeflow;
namespace fs = std::filesystem;
namespace tf_testing = typeflow::testing;

using typeflow::testing::same_bits;
using typeflow::testing::same_tensors;

namespace {

// 8 inputs, 16 hidden, 4 classes: kernel (8, 16), bias (16), kernel (16, 4)
// with rows padded to 16 floats, bias (4) padded to 16 (checked below).
using mlp = tf::sequential<tf::input<8>, tf::dense<16>, tf::relu, tf::dense<4, tf::float32>>;
using frozen_mlp = tf::sequential<tf::input<8>, tf::frozen<tf::dense<16>>, tf::relu, tf::dense<16>, tf::relu,
                                  tf::dense<4, tf::float32>>;

template <class Strategy, class Net = mlp, class Policy = tf::float32>
using model_under = tf::model<Net, Policy, Strategy>;
template <int Stage, int N>
using zero_mirrored = tf::zero<Stage, tf::mirrored<N>>;
template <class Model>
constexpr int stage_of = tf::zero_stage_v<std::remove_cvref_t<decltype(std::declval<const Model&>().strategy())>>;

auto batch_number(int index) { return tf_testing::numbered_batch<16, 8, 4>(index); }
const tf::losses::sparse_categorical_crossentropy logits_loss{.from_logits = true};

template <class Model, class Optimizer>
void train(Model& model, const Optimizer& optimizer, int steps = 5) {
  model.compile(optimizer, logits_loss);
  for (int step = 0; step < steps; ++step) model.train_on_batch(batch_number(step));
}

// The process's minor page faults so far.
long page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// The largest |a - b| / max(|a|, 1e-3) over a checkpoint's tensors.
double largest_relative_gap(const fs::path& a, const fs::path& b) {
  const auto x = tf::io::read_checkpoint(a), y = tf::io::read_checkpoint(b);
  double worst = 0;
  for (const auto& name : tf::checkpoint_tensor_names(x)) {
    const auto p = tf::checkpoint_floats(x, name), q = tf::checkpoint_floats(y, name);
    for (std::size_t i = 0; i < p.size(); ++i)
      worst = std::max(worst, std::fabs(double{p[i]} - q[i]) / std::max(std::fabs(double{p[i]}), 1e-3));
  }
  return worst;
}

// Trains the zero<> model and the mirrored<N> one alike and checks the
// weights on every replica (under zero<3> replica r's shard: the rest is
// gathered when needed) and every optimizer slot (gathered from the shards
// by save_checkpoint) against mirrored<N>'s, bit for bit.
template <class Sharded, class Mirrored, class Optimizer>
void check_same_bits(const Optimizer& optimizer, int steps = 5) {
  Sharded sharded{7};
  Mirrored mirrored{7};
  train(sharded, optimizer, steps);
  train(mirrored, optimizer, steps);
  CHECK(sharded.iterations() == mirrored.iterations());
  CHECK(same_bits(sharded.parameter_region(), mirrored.parameter_region()));
  for (int r = 1; r < Sharded::replica_count; ++r) {
    const std::span<const float> own = sharded.replica_parameter_region(r);
    const std::span<const float> reference = mirrored.replica_parameter_region(r);
    if constexpr (stage_of<Sharded> >= 3) {
      const auto bounds = tf::shard_bounds(Sharded::bound_network::trainable_floats, Sharded::replica_count);
      const std::size_t begin = bounds[static_cast<std::size_t>(r)], end = bounds[static_cast<std::size_t>(r) + 1];
      CHECK(same_bits(own.subspan(begin, end - begin), reference.subspan(begin, end - begin)));
      CHECK(same_bits(own.subspan(Sharded::bound_network::trainable_floats),
                      reference.subspan(Sharded::bound_network::trainable_floats)));  // frozen weights, whole
    } else {
      CHECK(same_bits(own, reference));
    }
  }
  tf_testing::temp_dir a("typeflow_zero_test_a"), b("typeflow_zero_test_b");
  CHECK(same_tensors(sharded.save_checkpoint(a.path), mirrored.save_checkpoint(b.path)));
}

}  // namespace

TEST_CASE("zero<1|2, mirrored<2|4>> with adam train to mirrored<N>'s weights and slots, bit for bit") {
  const tf::optimizers::adam adam{.learning_rate = 0.01};
  check_same_bits<model_under<zero_mirrored<1, 2>>, model_under<tf::mirrored<2>>>(adam);
  check_same_bits<model_under<zero_mirrored<2, 2>>, model_under<tf::mirrored<2>>>(adam);
  check_same_bits<model_under<zero_mirrored<1, 4>>, model_under<tf::mirrored<4>>>(adam);
  check_same_bits<model_under<zero_mirrored<2, 4>>, model_under<tf::mirrored<4>>>(adam);
  check_same_bits<model_under<zero_mirrored<3, 2>>, model_under<tf::mirrored<2>>>(adam);
  check_same_bits<model_under<zero_mirrored<3, 4>>, model_under<tf::mirrored<4>>>(adam);
}

TEST_CASE("zero<k> with sgd momentum, clipnorm, accumulate<2> and decoupled weight decay gives mirrored<N>'s bits") {
  const tf::optimizers::sgd momentum{.learning_rate = 0.1, .momentum = 0.9, .clipnorm = 0.05f};
  check_same_bits<model_under<zero_mirrored<1, 2>>, model_under<tf::mirrored<2>>>(momentum);
  check_same_bits<model_under<zero_mirrored<2, 4>>, model_under<tf::mirrored<4>>>(momentum);
  const auto accumulated = tf::optimizers::accumulate<2>(tf::optimizers::adamw{.learning_rate = 0.01, .weight_decay = 0.1f});
  check_same_bits<model_under<zero_mirrored<1, 4>>, model_under<tf::mirrored<4>>>(accumulated, 7);  // 3 updates, 1 pending
  check_same_bits<model_under<zero_mirrored<2, 2>>, model_under<tf::mirrored<2>>>(accumulated, 7);
  check_same_bits<model_under<zero_mirrored<3, 4>>, model_under<tf::mirrored<4>>>(momentum);
  check_same_bits<model_under<zero_mirrored<3, 2>>, model_under<tf::mirrored<2>>>(accumulated, 7);
}

TEST_CASE("global_clipnorm: zero<1> gives mirrored<N>'s bits, zero<2|3> sum the shards' norms, within 1e-6") {
  // A limit below the gradients' norm, so that every update clips (sgd's
  // step, unlike adam's, scales with the factor).
  const tf::optimizers::sgd clipped{.learning_rate = 0.1, .momentum = 0.9, .global_clipnorm = 0.05f};
  check_same_bits<model_under<zero_mirrored<1, 2>>, model_under<tf::mirrored<2>>>(clipped);
  model_under<zero_mirrored<2, 4>> sharded{7};
  model_under<tf::mirrored<4>> mirrored{7}, unclipped{7};
  train(sharded, clipped);
  train(mirrored, clipped);
  train(unclipped, tf::optimizers::sgd{.learning_rate = 0.1, .momentum = 0.9});
  CHECK(!same_bits(unclipped.parameter_region(), mirrored.parameter_region()));  // the limit clips
  tf_testing::temp_dir a("typeflow_zero_test_a"), b("typeflow_zero_test_b");
  const double gap = largest_relative_gap(sharded.save_checkpoint(a.path), mirrored.save_checkpoint(b.path));
  MESSAGE("zero<2, mirrored<4>> with global_clipnorm: largest relative gap to mirrored<4> " << gap);
  CHECK(gap <= 1e-6);
  model_under<zero_mirrored<3, 4>> gathered{7};  // zero<3> sums the norms as zero<2> does
  train(gathered, clipped);
  tf_testing::temp_dir c("typeflow_zero_test_c");
  const double gathered_gap = largest_relative_gap(gathered.save_checkpoint(c.path), b.path);
  MESSAGE("zero<3, mirrored<4>> with global_clipnorm: largest relative gap to mirrored<4> " << gathered_gap);
  CHECK(gathered_gap <= 1e-6);
}

TEST_CASE("zero<2>: a gradient that is not finite in one shard stops the step before any replica updates") {
  model_under<zero_mirrored<2, 2>> model{4};
  model.compile(tf::optimizers::adam{.learning_rate = 0.01}, logits_loss);
  model.train_on_batch(batch_number(0));
  const std::vector<float> before(model.parameter_region().begin(), model.parameter_region().end());
  auto poisoned = batch_number(1);
  poisoned.features[9 * 8 + 3] = std::nanf("");  // sample 9 (replica 1's), feature 3: row 3 of layers.1.kernel, in shard 0
  CHECK_THROWS_WITH_AS(model.train_on_batch(poisoned), doctest::Contains("the gradient of layers.1.kernel is not finite"),
                       tf::non_finite_error);
  CHECK(same_bits(model.parameter_region(), before));
  CHECK(same_bits(model.replica_parameter_region(1), before));
  CHECK(model.iterations() == 1);
}

TEST_CASE("zero<k> over frozen<> layers shards only the trainable region and gives mirrored<N>'s bits") {
  static_assert(model_under<tf::mirrored<2>, frozen_mlp>::bound_network::trainable_floats <
                model_under<tf::mirrored<2>, frozen_mlp>::bound_network::parameter_floats);
  const tf::optimizers::adam adam{.learning_rate = 0.01};
  check_same_bits<model_under<zero_mirrored<2, 4>, frozen_mlp>, model_under<tf::mirrored<4>, frozen_mlp>>(adam);
  check_same_bits<model_under<zero_mirrored<3, 4>, frozen_mlp>, model_under<tf::mirrored<4>, frozen_mlp>>(adam);
}

TEST_CASE("zero<2|3> under mixed_float16: one loss-scale verdict over every shard, mirrored<N>'s bits") {
  const auto run = [](auto& model) {
    model.compile(tf::optimizers::adam{.learning_rate = 0.01}, logits_loss);
    // 2^24 overflows float16's gradients: the first steps are skipped and the scale halves.
    model.set_loss_scale(tf::precision::dynamic_loss_scale{.initial_scale = 16777216.f, .growth_steps = 2});
    for (int step = 0; step < 8; ++step) model.train_on_batch(batch_number(step));
  };
  const auto check_stage = [&]<int Stage>() {
    model_under<zero_mirrored<Stage, 2>, mlp, tf::mixed_float16> sharded{3};
    model_under<tf::mirrored<2>, mlp, tf::mixed_float16> mirrored{3};
    run(sharded);
    run(mirrored);
    CHECK(mirrored.skipped_steps() > 0);
    CHECK(sharded.skipped_steps() == mirrored.skipped_steps());
    CHECK(sharded.loss_scale() == mirrored.loss_scale());
    CHECK(sharded.iterations() == mirrored.iterations());
    CHECK(same_bits(sharded.parameter_region(), mirrored.parameter_region()));
    tf_testing::temp_dir a("typeflow_zero_test_a"), b("typeflow_zero_test_b");
    CHECK(same_tensors(sharded.save_checkpoint(a.path), mirrored.save_checkpoint(b.path)));
  };
  check_stage.template operator()<2>();
  check_stage.template operator()<3>();
}

TEST_CASE("rank_memory: each replica's bytes, by hand, and the device budget per replica") {
  using net = model_under<tf::mirrored<2>>::bound_network;
  // kernel 8 x 16 (128) + bias 16 + kernel 16 x 4 in rows padded to 16 (256) + bias 4 padded to 16.
  static_assert(net::trainable_floats == 128 + 16 + 256 + 16 && net::parameter_floats == 416);
  using two = tf::rank_memory<net, zero_mirrored<1, 2>, 16>;
  using four = tf::rank_memory<net, zero_mirrored<2, 4>, 16>;
  using unsharded = tf::rank_memory<net, tf::mirrored<2>, 16>;
  // 416 / 2 = 208 floats, a multiple of 16; 416 / 4 = 104, rounded up to 112.
  static_assert(two::shards::shard_floats == 208 && four::shards::shard_floats == 112);
  static_assert(four::shards::begin(3) == 336 && four::shards::size(3) == 80);  // the last is shorter
  // The same cut when the count is known at run time (multi_worker's workers).
  CHECK(tf::shard_bounds(416, 4) == std::vector<std::size_t>{0, 112, 224, 336, 416});
  CHECK(tf::shard_bounds(20, 4) == std::vector<std::size_t>{0, 16, 20, 20, 20});  // empty shards at the end
  CHECK(tf::shard_bounds(416, 1) == std::vector<std::size_t>{0, 416});
  static_assert(unsharded::slot_bytes == 416 * 4 && two::slot_bytes == 208 * 4 && four::slot_bytes == 112 * 4);
  static_assert(two::parameter_bytes == 416 * 4 && four::parameter_bytes == 416 * 4);
  // zero<1> keeps the whole mean gradient; zero<2> its shard, and while backward
  // goes one layer's beyond it (the largest: dense<4>'s 256 + 16 floats).
  static_assert(two::gradient_bytes == 416 * 4 && two::reduced_gradient_bytes == 416 * 4);
  static_assert(four::gradient_bytes == 112 * 4 && four::reduced_gradient_bytes == 112 * 4);
  // On tf::cuda the backward writes the whole gradient region: zero<2>
  // shards the slots there, and the plan adds up to the memory plan's.
  using four_on_gpu = tf::rank_memory<net, zero_mirrored<2, 4>, 16, tf::cuda>;
  static_assert(four_on_gpu::gradient_bytes == 416 * 4 && four_on_gpu::slot_bytes == 112 * 4);
  static_assert(four_on_gpu::gathered_bytes == 0 && four_on_gpu::bytes_before_slots == four_on_gpu::plan::total_bytes);
  static_assert(two::gathered_bytes == 0 && four::gathered_bytes == 272 * 4);
  // Each replica's step region is that of its share of the batch.
  static_assert(two::activation_bytes == tf::memory_plan<net, 8, 0>::per_step_bytes);
  static_assert(four::activation_bytes == tf::memory_plan<net, 4, 0>::per_step_bytes);
  static_assert(four::bytes(0) == 416 * 4 + 112 * 4 + 272 * 4 + tf::memory_plan<net, 4, 0>::per_step_bytes);
  static_assert(two::bytes(2) == tf::memory_plan<net, 8, 0>::total_bytes + 2 * 208 * 4);
  static_assert(unsharded::bytes(2) == tf::memory_plan<net, 8, 0>::total_bytes + 2 * 416 * 4);

  // summary() and settings() say it.
  const std::string text = model_under<zero_mirrored<2, 4>>::summary_text();
  INFO(text);
  CHECK(text.find("Per replica (zero<2, mirrored<4>>, 4 replicas):\n"
                  "  parameters: 1,664 bytes\n"
                  "  gradients: 448 bytes (its shard)\n"
                  "  optimizer slots: 448 bytes each\n"
                  "  gathered: 1,088 bytes (one layer's gradients)\n") != std::string::npos);
  model_under<zero_mirrored<1, 2>> adam_model{1};
  adam_model.compile(tf::optimizers::adam{}, logits_loss);
  std::string slots_row;
  for (const auto& [name, value] : adam_model.settings())
    if (name == "optimizer slots per replica") slots_row = value;
  CHECK(slots_row == "832 bytes each (2 slots: 1,664 bytes)");

  // A budget with room for the plan and two slots' shards, not two whole slots:
  // zero<1, mirrored<2>> trains, mirrored<2> is refused before its first step.
  using budget = tf::device_budget<two::bytes(2)>;
  static_assert(two::bytes(2) < unsharded::bytes(2));
  tf::model<mlp, tf::float32, zero_mirrored<1, 2>, tf::cpu, budget> fits{1};
  tf::model<mlp, tf::float32, tf::mirrored<2>, tf::cpu, budget> refused{1};
  fits.compile(tf::optimizers::adam{}, logits_loss);
  refused.compile(tf::optimizers::adam{}, logits_loss);
  CHECK_NOTHROW(fits.train_on_batch(batch_number(0)));
  // What each replica's arena holds after the step: the plan's bytes, on
  // both, rounded up to the arena's 4 KiB pages.
  const auto holds = [](std::size_t arena, std::size_t plan) { return arena >= plan && arena < plan + 4096; };
  CHECK(holds(fits.arena_bytes(0), two::bytes(2)));
  CHECK(holds(fits.arena_bytes(1), two::bytes(2)));
  CHECK_THROWS_AS(static_cast<void>(fits.arena_bytes(2)), std::out_of_range);
  // Unsharded, replica 0 holds the slots whole and replica 1 none.
  tf::model<mlp, tf::float32, tf::mirrored<2>> unbudgeted{1};
  unbudgeted.compile(tf::optimizers::adam{}, logits_loss);
  unbudgeted.train_on_batch(batch_number(0));
  CHECK(holds(unbudgeted.arena_bytes(0), unsharded::bytes(2)));
  CHECK(holds(unbudgeted.arena_bytes(1), unsharded::bytes(0)));
  CHECK(unbudgeted.arena_bytes(1) < unsharded::bytes(2));
  const std::string needs = "needs " + std::to_string(unsharded::bytes(2)) + " bytes";
  CHECK_THROWS_WITH_AS(refused.train_on_batch(batch_number(0)), doctest::Contains(needs.c_str()), std::invalid_argument);
}

TEST_CASE("checkpoints cross sharding and replica counts: zero<1, mirrored<2>> to mirrored<2>, zero<2|3, ...>") {
  tf_testing::temp_dir dir("typeflow_zero_test_checkpoint"), x("typeflow_zero_test_x"), y("typeflow_zero_test_y");
  const tf::optimizers::adam adam{.learning_rate = 0.01};
  model_under<zero_mirrored<1, 2>> writer{5};
  train(writer, adam, 3);
  writer.save_checkpoint(dir.path);

  // The same replica count, unsharded: it continues as the writer does.
  model_under<tf::mirrored<2>> unsharded{99};
  unsharded.compile(adam, logits_loss);
  unsharded.load_checkpoint(dir.path);
  for (int step = 3; step < 6; ++step) CHECK(unsharded.train_on_batch(batch_number(step)) == writer.train_on_batch(batch_number(step)));
  CHECK(same_tensors(unsharded.save_checkpoint(x.path), writer.save_checkpoint(y.path)));

  // Four replicas, sharded (slots and gradients; and weights) and not: the same three steps from the same state.
  tf_testing::temp_dir p("typeflow_zero_test_p"), q("typeflow_zero_test_q"), w("typeflow_zero_test_w");
  model_under<zero_mirrored<2, 4>> four_sharded{98};
  model_under<zero_mirrored<3, 4>> four_gathered{96};
  model_under<tf::mirrored<4>> four{97};
  four_sharded.compile(adam, logits_loss);
  four_gathered.compile(adam, logits_loss);
  four.compile(adam, logits_loss);
  four_sharded.load_checkpoint(dir.path);
  four_gathered.load_checkpoint(dir.path);
  four.load_checkpoint(dir.path);
  CHECK(four_sharded.iterations() == 3);
  for (int step = 3; step < 6; ++step) {
    four_sharded.train_on_batch(batch_number(step));
    four_gathered.train_on_batch(batch_number(step));
    four.train_on_batch(batch_number(step));
  }
  CHECK(same_tensors(four_sharded.save_checkpoint(p.path), four.save_checkpoint(q.path)));
  CHECK(same_tensors(four_gathered.save_checkpoint(w.path), q.path));

  // Between two strategies that are neither zero<k> the refusal stays.
  model_under<tf::mirrored<4>> plain{1};
  plain.compile(adam, logits_loss);
  CHECK_THROWS_WITH_AS(plain.load_checkpoint(x.path),
                       doctest::Contains("another strategy: mirrored<2>; this model's is mirrored<4>"),
                       std::runtime_error);
}

// Loads the checkpoint in `from` into a model under each strategy, and
// checks that each holds its tensors bit for bit (written again, whole).
template <class... Strategies>
void check_loads_into(const fs::path& from, const tf::optimizers::adam& adam, const char* writer) {
  const auto written = tf::io::list_checkpoints(from).back();
  const auto one = [&]<class Strategy>() {
    model_under<Strategy> loader{55};
    loader.compile(adam, logits_loss);
    loader.load_checkpoint(from);
    tf_testing::temp_dir again("typeflow_zero_test_again");
    INFO(writer, " -> ", Strategy::name());
    CHECK(same_tensors(loader.save_checkpoint(again.path), written));
    CHECK(loader.iterations() == 3);
  };
  (one.template operator()<Strategies>(), ...);
}

TEST_CASE("sharded checkpoints: a file per replica's shard, read N -> M for N, M in {1, 2, 4}, bad files refused") {
  const tf::optimizers::adam adam{.learning_rate = 0.01};
  tf_testing::temp_dir one("typeflow_zero_test_n1"), two("typeflow_zero_test_n2"), four("typeflow_zero_test_n4");
  model_under<tf::single_device> single{5};
  model_under<zero_mirrored<2, 2>> halves{5};
  model_under<zero_mirrored<3, 4>> quarters{5};
  train(single, adam, 3);
  train(halves, adam, 3);
  train(quarters, adam, 3);
  single.save_checkpoint(one.path);
  halves.save_checkpoint(two.path);
  const fs::path written = quarters.save_checkpoint(four.path);

  // zero<3, mirrored<4>>: each replica's shard of the weights and of Adam's
  // two slots in its own file (416 trainable floats cut at 16-float lines:
  // 112, 112, 112, 80); state.safetensors keeps the region beyond them
  // (none here: this MLP's region is all trainable) and no whole weights.
  const auto read = tf::io::read_checkpoint(written);
  REQUIRE(read.shards);
  CHECK_FALSE(read.tensors.find("parameters"));
  REQUIRE(read.tensors.find("parameters.rest"));
  CHECK(read.tensors.find("parameters.rest")->shape == std::vector<std::int64_t>{0});
  CHECK_FALSE(read.tensors.find("optimizer.slot.0"));
  CHECK(read.manifest.at("format_version") == 5);
  CHECK(read.shards->bounds == std::vector<std::uint64_t>{0, 112, 224, 336, 416});
  CHECK(tf::checkpoint_floats(read, "parameters") == std::vector<float>(quarters.parameter_region().begin(),
                                                                         quarters.parameter_region().end()));
  for (int i = 0; i < 4; ++i) {
    const auto file = tf::io::safetensors_file::read(written / tf::io::checkpoint_shard_name(i, 4));
    CHECK(file.tensors().size() == 3);
    CHECK(file.find("parameters")->shape == std::vector<std::int64_t>{i == 3 ? 80 : 112});
    CHECK(file.find("optimizer.slot.1")->shape == std::vector<std::int64_t>{i == 3 ? 80 : 112});
    CHECK(file.metadata().at("shard") == std::to_string(i));
  }
  CHECK(tf::io::checkpoint_shard_name(1, 4) == "slots-00002-of-00004.safetensors");

  // N -> M: one (single_device), two and four shards into one, two and four
  // replicas, sharded at every stage and not.
  check_loads_into<tf::single_device, zero_mirrored<1, 2>, zero_mirrored<3, 2>, zero_mirrored<2, 4>>(
      one.path, adam, "single_device");
  check_loads_into<tf::single_device, tf::mirrored<2>, zero_mirrored<1, 2>, zero_mirrored<2, 4>, tf::mirrored<4>>(
      two.path, adam, "zero<2, mirrored<2>>");
  check_loads_into<tf::single_device, zero_mirrored<2, 2>, tf::mirrored<4>, zero_mirrored<1, 4>, zero_mirrored<3, 4>>(
      four.path, adam, "zero<3, mirrored<4>>");

  // The same N continues bit for bit.
  model_under<zero_mirrored<3, 4>> resumed{77};
  resumed.compile(adam, logits_loss);
  resumed.load_checkpoint(four.path);
  for (int step = 3; step < 6; ++step)
    CHECK(resumed.train_on_batch(batch_number(step)) == quarters.train_on_batch(batch_number(step)));
  CHECK(same_bits(resumed.parameter_region(), quarters.parameter_region()));

  // A shard file corrupt, in another file's place or missing: refused,
  // naming the file, before the loading model changes.
  model_under<zero_mirrored<2, 4>> victim{9};
  train(victim, adam, 1);
  const std::vector<float> before(victim.parameter_region().begin(), victim.parameter_region().end());
  const fs::path second = written / tf::io::checkpoint_shard_name(1, 4), third = written / tf::io::checkpoint_shard_name(2, 4);
  const auto refused = [&](const std::string& because) {
    CHECK_THROWS_WITH_AS(victim.load_checkpoint(written), doctest::Contains(because.c_str()), std::runtime_error);
    CHECK(victim.iterations() == 1);
    CHECK(same_bits(victim.parameter_region(), before));
  };
  {
    std::fstream f(third, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char last = static_cast<char>(f.get());
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(last ^ 0x10));
  }
  refused("\"" + third.string() + "\" is corrupt: the data of \"optimizer.slot.1\" gives CRC-32C");
  fs::rename(third, written / "aside");
  fs::copy_file(second, third);
  refused("\"" + third.string() + "\" holds shard 1 of 4, floats [112, 224); manifest.json places it as shard 2 of 4, "
          "[224, 336)");
  fs::remove(third);
  refused("\"" + third.string() + "\" is missing: manifest.json lists it as shard 2 of 4 of the optimizer's slots");
}

TEST_CASE("fit under zero<2, mirrored<2>> gives mirrored<2>'s history and weights") {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  for (int i = 0; i < 64; ++i) {
    for (int j = 0; j < 8; ++j) x.push_back(j == i % 4 ? 1.f : 0.f);
    y.push_back(i % 4);
  }
  auto data = tf::data::from_tensor_slices<tf::shape<8>>(x, y) | tf::data::shuffle(64, 1) | tf::data::batch<16>;
  model_under<zero_mirrored<2, 2>> sharded{2};
  model_under<tf::mirrored<2>> mirrored{2};
  sharded.compile(tf::optimizers::adam{.learning_rate = 0.01}, logits_loss, tf::metrics::accuracy{});
  mirrored.compile(tf::optimizers::adam{.learning_rate = 0.01}, logits_loss, tf::metrics::accuracy{});
  const auto a = sharded.fit(data, {.epochs = 2, .verbose = 0});
  const auto b = mirrored.fit(data, {.epochs = 2, .verbose = 0});
  CHECK(a["loss"] == b["loss"]);
  CHECK(a["accuracy"] == b["accuracy"]);
  CHECK(same_bits(sharded.parameter_region(), mirrored.parameter_region()));
}

TEST_CASE("use_ema under zero<k>: the average is one more sharded slot, mirrored<N>'s bits, swap and finalize too") {
  // ema_overwrite_frequency = 3: the third update overwrites the weights on each shard's owner,
  // and the all-gather carries it to every replica.
  const tf::optimizers::adam adam{.learning_rate = 0.01, .use_ema = true, .ema_momentum = 0.9f,
                                  .ema_overwrite_frequency = 3};
  check_same_bits<model_under<zero_mirrored<1, 2>>, model_under<tf::mirrored<2>>>(adam);
  check_same_bits<model_under<zero_mirrored<2, 4>>, model_under<tf::mirrored<4>>>(adam);
  // swap_ema_weights and the fit's finalize give mirrored<2>'s weights, on every replica.
  model_under<zero_mirrored<2, 2>> sharded{7};
  model_under<tf::mirrored<2>> mirrored{7};
  const tf::optimizers::adam plain_ema{.learning_rate = 0.01, .use_ema = true, .ema_momentum = 0.9f};
  train(sharded, plain_ema);
  train(mirrored, plain_ema);
  sharded.swap_ema_weights();
  mirrored.swap_ema_weights();
  CHECK(same_bits(sharded.parameter_region(), mirrored.parameter_region()));
  sharded.swap_ema_weights();
  mirrored.swap_ema_weights();
  sharded.train_on_batch(batch_number(9));
  mirrored.train_on_batch(batch_number(9));
  CHECK(same_bits(sharded.parameter_region(), mirrored.parameter_region()));
  CHECK(same_bits(sharded.replica_parameter_region(1), mirrored.parameter_region()));
  sharded.finalize_variable_values();
  mirrored.finalize_variable_values();
  CHECK(same_bits(sharded.parameter_region(), mirrored.parameter_region()));
  tf_testing::temp_dir a("typeflow_zero_test_ema_a"), b("typeflow_zero_test_ema_b");
  CHECK(same_tensors(sharded.save_checkpoint(a.path), mirrored.save_checkpoint(b.path)));
}

namespace {

// A language model whose head reads the embedding's matrix (tied_logits):
// zero<3> gathers the matrix for the head too, and reduces its gradient,
// which the head writes and the embedding completes, after the embedding's
// backward. Its blocks are gathered one copy at a time (repeat), and the
// recomputed block child by child, in its backward's forward too.
constexpr int tokens = 8, vocabulary = 32;
using tied_lm = tf::sequential<tf::typed_input<tf::int32, tokens>, tf::embedding<vocabulary, 16>,
                               tf::repeat<3, tf::residual<tf::layer_norm, tf::dense<16>, tf::relu>>,
                               tf::recompute<tf::dense<16>, tf::relu, tf::dense<16>>, tf::layer_norm, tf::tied_logits>;
using token_ids = tf::data::tensor_value<std::int32_t, tf::shape<tokens>>;
tf::data::batch_of<8, token_ids, token_ids> token_batch(int index) {
  tf::data::batch_of<8, token_ids, token_ids> b;
  const tf::random_stream rng{17, static_cast<std::uint64_t>(index)};
  for (std::size_t i = 0; i < b.features.size(); ++i)
    b.features[i] = static_cast<std::int32_t>(rng.uniform(i) * vocabulary);
  for (std::size_t i = 0; i < b.labels.size(); ++i)
    b.labels[i] = static_cast<std::int32_t>(rng.uniform(i + 1000) * vocabulary);
  b.valid = 8;
  return b;
}
// batch_normalization's moving statistics: each replica's own, never gathered.
using normalized_mlp =
    tf::sequential<tf::input<8>, tf::dense<16>, tf::batch_normalization<>, tf::relu, tf::dense<4, tf::float32>>;
// Regularizers: their gradients added to each shard's owner, their penalty
// summed from the owners' weights (a kernel of 32 KiB: pages that replica 0
// gives back).
using l1_l2 = tf::kernel_regularizer<tf::regularizers::l1_l2<0.01f, 0.1f>>;
using regularized_mlp = tf::sequential<tf::input<64>, tf::dense<128, l1_l2>, tf::relu,
                                       tf::dense<4, tf::float32, tf::bias_regularizer<tf::regularizers::l2<0.5f>>>>;

// Twenty layers of 256 x 256: no layer is more than a twentieth of the model,
// so that what zero<3> gathers for one is small beside the shards.
template <int... I>
using deep_of = tf::sequential<tf::input<256>, tf::dense<256 + 0 * I>..., tf::dense<4, tf::float32>>;
using deep_mlp = decltype([]<int... I>(std::integer_sequence<int, I...>) -> deep_of<I...> { return {}; }(
    std::make_integer_sequence<int, 20>{}));
auto deep_batch(int index) { return tf_testing::numbered_batch<16, 256, 4>(index); }
// The same twenty layers as one repeat<>: gathered one copy at a time.
using deep_repeat = tf::sequential<tf::input<256>, tf::repeat<20, tf::dense<256>>, tf::dense<4, tf::float32>>;

}  // namespace

TEST_CASE("zero<3> with use_ema, batch_norm, a tied embedding, regularizers and mixed_bfloat16: mirrored<N>'s bits") {
  const tf::optimizers::adam ema{
      .learning_rate = 0.01, .use_ema = true, .ema_momentum = 0.9f, .ema_overwrite_frequency = 3};
  check_same_bits<model_under<zero_mirrored<3, 4>>, model_under<tf::mirrored<4>>>(ema);
  check_same_bits<model_under<zero_mirrored<3, 2>, normalized_mlp>, model_under<tf::mirrored<2>, normalized_mlp>>(
      tf::optimizers::adam{.learning_rate = 0.01});
  {
    model_under<zero_mirrored<3, 2>, tied_lm> sharded{5};
    model_under<tf::mirrored<2>, tied_lm> mirrored{5};
    sharded.compile(tf::optimizers::adamw{.learning_rate = 0.01}, logits_loss);
    mirrored.compile(tf::optimizers::adamw{.learning_rate = 0.01}, logits_loss);
    for (int step = 0; step < 4; ++step)
      CHECK(sharded.train_on_batch(token_batch(step)) == mirrored.train_on_batch(token_batch(step)));
    CHECK(same_bits(sharded.parameter_region(), mirrored.parameter_region()));
    tf_testing::temp_dir a("typeflow_zero_test_tied_a"), b("typeflow_zero_test_tied_b");
    CHECK(same_tensors(sharded.save_checkpoint(a.path), mirrored.save_checkpoint(b.path)));
    // generate reads replica 0's weights gathered whole; the next step frees them again.
    const std::vector<std::int32_t> prompt{3, 1, 4};
    CHECK(sharded.generate(prompt, 4, {.temperature = 0.f}) == mirrored.generate(prompt, 4, {.temperature = 0.f}));
    model_under<zero_mirrored<3, 2>, tied_lm> untrained{5};  // before any step
    model_under<tf::mirrored<2>, tied_lm> untrained_reference{5};
    // zero<2>'s combinators call their hooks in forward too, before any step has given them an arena.
    model_under<zero_mirrored<2, 2>, tied_lm> untrained_zero2{5};
    untrained_zero2.compile(tf::optimizers::adamw{.learning_rate = 0.01}, logits_loss);
    untrained_reference.compile(tf::optimizers::adamw{.learning_rate = 0.01}, logits_loss);
    CHECK(untrained_zero2.test_on_batch(token_batch(0)) == untrained_reference.test_on_batch(token_batch(0)));
    CHECK(untrained_zero2.train_on_batch(token_batch(0)) == untrained_reference.train_on_batch(token_batch(0)));
    model_under<tf::mirrored<2>, tied_lm> fresh_reference{5};
    CHECK(untrained.generate(prompt, 4, {.temperature = 0.f}) == fresh_reference.generate(prompt, 4, {.temperature = 0.f}));
    CHECK(sharded.train_on_batch(token_batch(9)) == mirrored.train_on_batch(token_batch(9)));
    CHECK(same_bits(sharded.parameter_region(), mirrored.parameter_region()));
  }
  {  // mixed_bfloat16: with AVX512-BF16 each layer's bf16 copy of its weights is made from the gathered ones
    model_under<zero_mirrored<3, 2>, regularized_mlp, tf::mixed_bfloat16> sharded{6};
    model_under<tf::mirrored<2>, regularized_mlp, tf::mixed_bfloat16> mirrored{6};
    sharded.compile(tf::optimizers::adam{.learning_rate = 0.01}, logits_loss);
    mirrored.compile(tf::optimizers::adam{.learning_rate = 0.01}, logits_loss);
    for (int step = 0; step < 3; ++step) {
      const auto batch = tf_testing::numbered_batch<16, 64, 4>(step);
      sharded.train_on_batch(batch);
      mirrored.train_on_batch(batch);
    }
    CHECK(same_bits(sharded.parameter_region(), mirrored.parameter_region()));
  }
  {
    model_under<zero_mirrored<3, 2>, regularized_mlp> sharded{6};
    model_under<tf::mirrored<2>, regularized_mlp> mirrored{6};
    sharded.compile(tf::optimizers::sgd{.learning_rate = 0.1}, logits_loss);
    mirrored.compile(tf::optimizers::sgd{.learning_rate = 0.1}, logits_loss);
    for (int step = 0; step < 3; ++step) {
      const auto batch = tf_testing::numbered_batch<16, 64, 4>(step);
      CHECK(sharded.train_on_batch(batch) == doctest::Approx(mirrored.train_on_batch(batch)).epsilon(1e-6));
    }
    const auto data = tf::data::from_tensor_slices<tf::shape<64>>(std::vector<float>(32 * 64, 0.5f),
                                                                  std::vector<std::int32_t>(32, 1)) |
                      tf::data::batch<16>;
    CHECK(sharded.evaluate(data)["loss"] == doctest::Approx(mirrored.evaluate(data)["loss"]).epsilon(1e-6));
    CHECK(same_bits(sharded.parameter_region(), mirrored.parameter_region()));
  }
}

TEST_CASE("zero<3>: fit with validation, evaluate and predict gather replica 0's weights layer by layer") {
  std::vector<float> x;
  std::vector<std::int32_t> y;
  for (int i = 0; i < 64; ++i) {
    for (int j = 0; j < 8; ++j) x.push_back(j == i % 4 ? 1.f : 0.25f * static_cast<float>(j % 3));
    y.push_back(i % 4);
  }
  auto data = tf::data::from_tensor_slices<tf::shape<8>>(x, y) | tf::data::shuffle(64, 1) | tf::data::batch<16>;
  model_under<zero_mirrored<3, 4>> sharded{2};
  model_under<tf::mirrored<4>> mirrored{2};
  sharded.compile(tf::optimizers::adam{.learning_rate = 0.01}, logits_loss, tf::metrics::accuracy{});
  mirrored.compile(tf::optimizers::adam{.learning_rate = 0.01}, logits_loss, tf::metrics::accuracy{});
  // Before any step, evaluate sends the shards to their owners first.
  CHECK(sharded.evaluate(data)["loss"] == mirrored.evaluate(data)["loss"]);
  const auto a = sharded.fit(data, {.epochs = 2, .validation_data = data, .verbose = 0});
  const auto b = mirrored.fit(data, {.epochs = 2, .validation_data = data, .verbose = 0});
  CHECK(a["loss"] == b["loss"]);
  CHECK(a["val_loss"] == b["val_loss"]);
  CHECK(a["val_accuracy"] == b["val_accuracy"]);
  CHECK(sharded.predict(data) == mirrored.predict(data));
  CHECK(same_bits(sharded.parameter_region(), mirrored.parameter_region()));
  // Weights written from outside reach every shard's owner.
  tf_testing::temp_dir dir("typeflow_zero_test_weights");
  mirrored.save_weights(dir.path / "w.safetensors");
  model_under<zero_mirrored<3, 4>> loaded{9};
  loaded.compile(tf::optimizers::adam{.learning_rate = 0.01}, logits_loss);
  mirrored.compile(tf::optimizers::adam{.learning_rate = 0.01}, logits_loss);
  loaded.load_weights(dir.path / "w.safetensors");
  CHECK(loaded.train_on_batch(batch_number(3)) == mirrored.train_on_batch(batch_number(3)));
  CHECK(same_bits(loaded.parameter_region(), mirrored.parameter_region()));
}

TEST_CASE("zero<3>: a gradient that is not finite in one shard stops the step before any replica updates") {
  model_under<zero_mirrored<3, 2>> model{4};
  model.compile(tf::optimizers::adam{.learning_rate = 0.01}, logits_loss);
  model.train_on_batch(batch_number(0));
  const std::vector<float> before(model.parameter_region().begin(), model.parameter_region().end());
  auto poisoned = batch_number(1);
  poisoned.features[9 * 8 + 3] = std::nanf("");
  CHECK_THROWS_WITH_AS(model.train_on_batch(poisoned), doctest::Contains("the gradient of layers.1.kernel is not finite"),
                       tf::non_finite_error);
  CHECK(same_bits(model.parameter_region(), before));
  CHECK(model.iterations() == 1);
}

TEST_CASE("zero<3, mirrored<4>>: each replica holds its shard and one layer's gathered weights, measured in pages") {
  using sharded_model = model_under<zero_mirrored<3, 4>, deep_mlp>;
  using mirrored_model = model_under<tf::mirrored<4>, deep_mlp>;
  using net = sharded_model::bound_network;
  using plan = tf::rank_memory<net, zero_mirrored<3, 4>, 16>;
  using unsharded = tf::rank_memory<net, tf::mirrored<4>, 16>;
  // Weights, gradients and Adam's two slots: the plan's share, at most 30% of mirrored<4>'s.
  constexpr std::size_t planned =
      plan::parameter_bytes + plan::gradient_bytes + 2 * plan::slot_bytes + plan::gathered_bytes;
  constexpr std::size_t whole = unsharded::parameter_bytes + unsharded::gradient_bytes + 2 * unsharded::slot_bytes;
  static_assert(planned * 10 <= whole * 3);
  // One dense<256>'s kernel (rows padded) and bias, gathered, and its gradients.
  using groups = tf::layer_groups<net>;
  static_assert(groups::own[1].size() >= 256 * 256 + 256 && groups::largest_parameters == groups::own[1].size());
  static_assert(plan::gathered_bytes == 2 * groups::own[1].size() * sizeof(float));

  sharded_model sharded{3};
  mirrored_model mirrored{3};
  sharded.compile(tf::optimizers::adam{.learning_rate = 0.001}, logits_loss);
  mirrored.compile(tf::optimizers::adam{.learning_rate = 0.001}, logits_loss);
  sharded.track_state_peaks();
  for (int step = 0; step < 2; ++step)
    CHECK(sharded.train_on_batch(deep_batch(step)) == mirrored.train_on_batch(deep_batch(step)));
  CHECK(same_bits(sharded.parameter_region(), mirrored.parameter_region()));

  using repeat_model = model_under<zero_mirrored<3, 4>, deep_repeat>;
  using repeat_plan = tf::rank_memory<repeat_model::bound_network, zero_mirrored<3, 4>, 16>;
  static_assert(repeat_plan::gathered_bytes == plan::gathered_bytes);  // one copy of dense<256> at a time
  repeat_model repeated{3};
  model_under<tf::mirrored<4>, deep_repeat> repeated_reference{3};
  repeated.compile(tf::optimizers::adam{.learning_rate = 0.001}, logits_loss);
  repeated_reference.compile(tf::optimizers::adam{.learning_rate = 0.001}, logits_loss);
  repeated.track_state_peaks();
  for (int step = 0; step < 2; ++step)
    CHECK(repeated.train_on_batch(deep_batch(step)) == repeated_reference.train_on_batch(deep_batch(step)));
  CHECK(same_bits(repeated.parameter_region(), repeated_reference.parameter_region()));
#if TYPEFLOW_ARENA_MREMAP
  for (int r = 1; r < 4; ++r) {
    INFO("repeat<20>, replica " << r << ": peak " << repeated.peak_state_bytes(r));
    CHECK(repeated.peak_state_bytes(r) <= planned + planned / 10 + 64 * 1024);
  }
  {  // zero<2>: the weights whole, the gradients' shard and one layer's beyond it
    using plan2 = tf::rank_memory<net, zero_mirrored<2, 4>, 16>;
    constexpr std::size_t planned2 = plan2::parameter_bytes + plan2::gradient_bytes + 2 * plan2::slot_bytes +
                                     plan2::gathered_bytes;
    model_under<zero_mirrored<2, 4>, deep_mlp> slots_and_gradients{3};
    slots_and_gradients.compile(tf::optimizers::adam{.learning_rate = 0.001}, logits_loss);
    slots_and_gradients.track_state_peaks();
    slots_and_gradients.train_on_batch(deep_batch(0));  // pages given back and faulted in, as the window is learnt
    slots_and_gradients.train_on_batch(deep_batch(1));  // the window mapped
    const long before = page_faults();
    slots_and_gradients.train_on_batch(deep_batch(2));
    const long during = page_faults() - before;
    MESSAGE("page faults during a zero<2, mirrored<4>> step (20 layers, 4 replicas): " << during);
    CHECK(during < 200);
    for (int r = 0; r < 4; ++r) {
      INFO("zero<2>, replica " << r << ": peak " << slots_and_gradients.peak_state_bytes(r) << ", planned " << planned2);
      CHECK(slots_and_gradients.peak_state_bytes(r) <= planned2 + planned2 / 10 + 64 * 1024);
    }
  }
  const std::size_t mirrored_bytes = mirrored.resident_state_bytes(0);
  CHECK(mirrored_bytes >= whole);
  {
    // A step after the first: every layer's weights are gathered twice and
    // its gradients written once, into pages that stay mapped. (Given back
    // and faulted in again, 20 layers of 64 pages took about 5,000 faults.)
    // (The step after parameter_region() maps replica 0's window anew.)
    sharded.train_on_batch(deep_batch(2));
    const long before = page_faults();
    sharded.train_on_batch(deep_batch(3));
    const long during = page_faults() - before;
    MESSAGE("page faults during a zero<3, mirrored<4>> step (20 layers, 4 replicas): " << during);
    CHECK(during < 200);
    sharded.track_state_peaks();
    sharded.train_on_batch(deep_batch(4));
  }
  for (int r = 1; r < 4; ++r) {  // replica 0's weights were gathered whole for parameter_region()
    const std::size_t peak = sharded.peak_state_bytes(r), now = sharded.resident_state_bytes(r);
    INFO("replica " << r << ": peak " << peak << " bytes, after the step " << now << ", planned " << planned
                    << ", mirrored<4>'s replica 0 " << mirrored_bytes);
    if (r == 1)
      MESSAGE("zero<3, mirrored<4>>, 20 layers of 256 x 256: replica 1's weights, gradients and slots peak at " << peak
              << " bytes (repeat<20>: " << repeated.peak_state_bytes(1) << "), planned " << planned
              << "; mirrored<4>'s replica 0 holds " << mirrored_bytes);
    CHECK(peak <= planned + planned / 10 + 64 * 1024);
    CHECK(peak * 10 <= mirrored_bytes * 3);
    // Between steps, the shards, the window that every layer's gathered
    // weights and gradients share (the plan's gathered bytes: one layer's)
    // and at most the pages that two layers share, in each region.
    constexpr std::size_t shared_pages = 2 * (net::layer_count + 1) * 4096;
    CHECK(now <= planned + shared_pages);
    CHECK(now + plan::gathered_bytes / 2 > planned);  // the window stays: no page is faulted in again
  }
  {
    // A checkpoint gathers nothing: each replica's shard of the weights goes
    // to its file, and replica 0 keeps what it held.
    const std::size_t before = sharded.resident_state_bytes(0);
    tf_testing::temp_dir dir("typeflow_zero_test_deep");
    (void)sharded.save_checkpoint(dir.path);
    CHECK(sharded.resident_state_bytes(0) == before);
    (void)sharded.parameter_region();  // what a gather would have held
    CHECK(sharded.resident_state_bytes(0) > before + plan::gathered_bytes);
  }
#else
  MESSAGE("the arena is a heap block under AddressSanitizer: its pages are not given back, so nothing is measured");
#endif
}

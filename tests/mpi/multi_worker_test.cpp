// multi_worker across processes. A plain program (not doctest): every rank
// must make the same collective calls in the same order, which one main makes
// plain. ctest starts it itself (tests/CMakeLists.txt):
//
//   mpirun -np 2 multi_worker_test         the checks below, on every rank (-np 4 too);
//   multi_worker_test                      the same, as one worker without mpirun;
//   mpirun -np 2 multi_worker_test MODE [TIMEOUT_SECONDS]
//                                          rank 1 fails after 3 steps (MODE: stall,
//                                          stall-caught, throw, exit, crash,
//                                          finish-early; finish-early-peer-asleep:
//                                          rank 0 sleeps outside any collective), and the
//                                          job must stop; tests/mpi/expect_job_failure.sh
//                                          checks the exit status, the time and the message.
//
// The checks: after 10 steps (adam, and sgd with momentum), W workers at
// per-worker batch 128 / W on shard(W, rank) of the data match one process at
// batch 128 on all the data to a relative 1e-5 (rank 0 trains that reference
// itself; |a - b| / max(|a|, 1e-2), as tests/unit/mirrored_test.cpp); every rank holds
// the same weights, bit for bit; the broadcast gives every rank rank 0's
// initial weights whatever seed it was given; only rank 0 writes
// save_weights. zero<1|2, multi_worker> (each worker keeps its shard of the
// optimizer slots, and under zero<2> of the mean gradient) trains to
// multi_worker's weights and slots, bit for bit with one or two workers
// (four: the reduce-scatter may sum in another order, 1e-5); its arena
// holds one shard of each slot; its checkpoints continue bit for bit, and
// load into a single-process model and into zero<1, mirrored<2>>. Returns
// non-zero if a check failed on any rank.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <typeflow/distribute/multi_worker.hpp>  // includes <mpi.h>, without MPI's C++ bindings
#include <typeflow/typeflow.hpp>

#include "../support/resume_fixture.hpp"

namespace tf = typeflow;

namespace {

using net = tf::sequential<tf::input<12>, tf::dense<32>, tf::relu, tf::dense<16>, tf::tanh, tf::dense<4>>;
using repeat_net =
    tf::sequential<tf::input<12>, tf::dense<32>, tf::relu, tf::repeat<3, tf::dense<32>>, tf::tanh, tf::dense<4>>;
constexpr int global_batch = 128;
constexpr int steps = 10;
constexpr int samples = global_batch * steps;

int rank = 0, workers = 1, failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("[rank %d] %s: %s\n", rank, ok ? "ok" : "FAILED", what.c_str());
  std::fflush(stdout);
  if (!ok) ++failures;
}

// Fixed data, the same on every rank: features in [-1, 1), and as label
// (0..3) the largest of the first four features, a rule the network can
// learn, so that the gradients stay well above rounding noise.
auto full_data() {
  std::vector<float> x(samples * 12);
  std::vector<std::int32_t> y(samples);
  const tf::random_stream rng{91, 7};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 2.f * rng.uniform(i) - 1.f;
  for (int i = 0; i < samples; ++i)
    y[i] = static_cast<std::int32_t>(std::max_element(x.begin() + i * 12, x.begin() + i * 12 + 4) - (x.begin() + i * 12));
  return tf::data::from_tensor_slices<tf::shape<12>>(std::move(x), std::move(y));
}

// Adam at Keras's default rate, as in the tests' step: it is scale-free (a
// gradient twice too large gives nearly the same step), so SGD with momentum
// checks the mean as well.
template <class Model, class Optimizer = tf::optimizers::adam>
void compile(Model& model, Optimizer optimizer = {}) {
  model.compile(optimizer, tf::losses::sparse_categorical_crossentropy{.from_logits = true}, tf::metrics::accuracy{});
}

double largest_relative_difference(std::span<const float> a, std::span<const float> b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(double{a[i]} - b[i]) / std::max(std::fabs(double{a[i]}), 1e-2));
  return worst;
}

// Whether `region` is the same, bit for bit, on every rank.
bool same_on_every_rank(std::span<const float> region) {
  std::vector<float> chief(region.begin(), region.end());
  MPI_Bcast(chief.data(), static_cast<int>(chief.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  int equal = std::equal(chief.begin(), chief.end(), region.begin()) ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &equal, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return equal == 1;
}

// On rank 0: trains a single-process model at batch 128 on all the data and
// compares its weights with the workers' (rank 0's copy).
template <int PerWorker, class Model, class Data, class Optimizer>
void compare_with_one_process(const Model& workers_model, const Data& data, Optimizer optimizer, const char* name) {
  if (rank != 0) return;
  tf::model<net> single{4};
  compile(single, optimizer);
  single.fit(data | tf::data::batch<global_batch>, {.epochs = 1, .verbose = 0});
  const double worst = largest_relative_difference(single.parameter_region(), workers_model.parameter_region());
  char text[200];
  std::snprintf(text, sizeof text,
                "%s: %d workers at batch %d match one process at batch %d after %d steps: largest relative "
                "difference %.3g (limit 1e-5)",
                name, workers, PerWorker, global_batch, steps, worst);
  check(worst <= 1e-5, text);
}

template <int PerWorker>
void checks() {
  // The helpers agree with MPI and with the strategy.
  tf::model<net, tf::float32, tf::multi_worker> model{rank == 0 ? 4u : 99u};  // rank 0's seed wins
  check(tf::distribute::worker_count() == workers && tf::distribute::worker_index() == rank &&
            model.strategy().size() == workers && model.strategy().rank() == rank &&
            model.is_chief() == (rank == 0) && tf::distribute::is_chief_worker() == (rank == 0),
        "worker_count/worker_index/rank/size/is_chief agree with MPI");

  // The broadcast: every rank starts from rank 0's initial weights.
  tf::model<net> seeded_4{4};
  check(std::ranges::equal(model.parameter_region(), seeded_4.parameter_region()),
        "the constructor's broadcast gives every rank rank 0's initial weights (the other ranks were seeded 99)");

  // W workers at batch 128 / W on their shards = one process at batch 128.
  const auto data = full_data();
  compile(model);
  auto shard = data | tf::data::shard(tf::distribute::worker_count(), tf::distribute::worker_index()) |
               tf::data::batch<PerWorker>;
  const auto history = model.fit(shard, {.epochs = 1, .verbose = 0});
  check(model.iterations() == steps, "fit ran " + std::to_string(model.iterations()) + " steps on the shard");
  check(std::isfinite(history["loss"].back()), "the loss rank " + std::to_string(rank) + " reports is finite");
  compare_with_one_process<PerWorker>(model, data, tf::optimizers::adam{}, "adam");

  tf::model<net, tf::float32, tf::multi_worker> with_sgd{4};
  const tf::optimizers::sgd sgd{.learning_rate = 0.1, .momentum = 0.9f};
  compile(with_sgd, sgd);
  with_sgd.fit(shard, {.epochs = 1, .verbose = 0});
  compare_with_one_process<PerWorker>(with_sgd, data, sgd, "sgd (momentum 0.9)");
  check(same_on_every_rank(with_sgd.parameter_region()), "sgd: the weights are identical on every rank, bit for bit");

  check(same_on_every_rank(model.parameter_region()), "the weights are identical on every rank, bit for bit");

  // save_weights: rank 0 writes, the others do not; what it wrote is everyone's weights.
  long job = static_cast<long>(::getpid());
  MPI_Bcast(&job, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  const std::filesystem::path dir = "multi_worker_test_" + std::to_string(job);
  if (rank == 0) std::filesystem::create_directories(dir);
  model.strategy().barrier();
  model.save_weights(dir / ("rank" + std::to_string(rank) + ".safetensors"));
  model.strategy().barrier();
  if (rank == 0) {
    bool only_chief = std::filesystem::exists(dir / "rank0.safetensors");
    for (int r = 1; r < workers; ++r)
      only_chief = only_chief && !std::filesystem::exists(dir / ("rank" + std::to_string(r) + ".safetensors"));
    check(only_chief, "save_weights wrote rank0.safetensors and no other rank's file");
  }
  tf::model<net> loaded{0};
  loaded.load_weights(dir / "rank0.safetensors");
  check(std::ranges::equal(loaded.parameter_region(), model.parameter_region()),
        "the chief's file holds this rank's weights");
  model.strategy().barrier();
  if (rank == 0) std::filesystem::remove_all(dir);

  // A checkpoint written mid-epoch by every rank (only the chief writes) and
  // loaded by every rank continues the job bit for bit.
  {
    auto shuffled = data | tf::data::shuffle(samples, 5) |
                    tf::data::shard(tf::distribute::worker_count(), tf::distribute::worker_index()) |
                    tf::data::batch<PerWorker>;
    tf::model<net, tf::float32, tf::multi_worker> whole{4}, first{4}, resumed{rank == 0 ? 77u : 78u};
    compile(whole);
    compile(first);
    compile(resumed);
    whole.fit(shuffled, {.epochs = 2, .verbose = 0});
    const std::filesystem::path ckpt = "multi_worker_test_ckpt_" + std::to_string(job);
    tf::callbacks::lambda_callback save_at_13({.on_train_batch_end = [&](std::int64_t, const tf::logs&) {
      if (first.iterations() != 13) return;
      first.save_checkpoint(ckpt);
      first.strategy().barrier();  // written before any rank reads it
    }});
    tf::callbacks::lambda_callback stop_at_13({.on_train_batch_end = [&](std::int64_t, const tf::logs&) {
      if (first.iterations() == 13) throw std::runtime_error("stop");  // the same step on every rank
    }});
    try {
      first.fit(shuffled, {.epochs = 2, .callbacks = {&save_at_13, &stop_at_13}, .verbose = 0});
    } catch (const std::runtime_error&) {
    }
    check(tf::io::list_checkpoints(ckpt).size() == 1, "save_checkpoint on every rank wrote one checkpoint (the chief's)");
    resumed.load_checkpoint(ckpt);
    resumed.fit(shuffled, {.epochs = 2, .verbose = 0});
    check(resumed.iterations() == whole.iterations() &&
              std::ranges::equal(resumed.parameter_region(), whole.parameter_region()),
          "a job continued mid-epoch from a checkpoint ends with the uninterrupted job's weights, bit for bit");
    check(same_on_every_rank(resumed.parameter_region()), "the continued job's weights are identical on every rank");
    model.strategy().barrier();
    if (rank == 0) std::filesystem::remove_all(ckpt);
  }

  // fit's epoch logs are the job's: each rank's History holds the mean of
  // the ranks' losses, the same on every rank (callbacks decide alike).
  const double loss = history["loss"].back();
  double lowest = loss, highest = loss;
  MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &highest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  check(lowest == highest, "the History's epoch loss is the same on every rank (the job's mean)");
  std::printf("[rank %d] the job's mean loss %.6f\n", rank, loss);

  // A loss that is not finite on the last worker alone (a target of 3e19
  // squares past float's range) while the all-reduced gradients stay finite
  // and updatable (below 2^60): every worker refuses the step, none updates.
  {
    using regression = tf::sequential<tf::input<12>, tf::dense<4>>;
    tf::model<regression, tf::float32, tf::multi_worker> overflowing{4};
    overflowing.compile(tf::optimizers::sgd{.learning_rate = 0.01f}, tf::losses::mean_squared_error{});
    tf::data::batch_of<PerWorker, tf::data::tensor_value<float, tf::shape<12>>,
                       tf::data::tensor_value<float, tf::shape<4>>>
        b;
    for (std::size_t i = 0; i < b.features.size(); ++i) b.features[i] = static_cast<float>(i % 7) / 7.f;
    std::fill(b.labels.begin(), b.labels.end(), 0.f);
    b.valid = PerWorker;
    if (rank == workers - 1) b.labels[0] = 3e19f;
    const std::vector<float> before(overflowing.parameter_region().begin(), overflowing.parameter_region().end());
    std::string refusal;
    try {
      overflowing.train_on_batch(b);
    } catch (const tf::non_finite_error& e) {
      refusal = e.what();
    }
    check(!refusal.empty() && std::ranges::equal(overflowing.parameter_region(), before) &&
              overflowing.iterations() == 0 && same_on_every_rank(overflowing.parameter_region()),
          "a loss that is not finite on one worker refuses the update on every worker: \"" + refusal.substr(0, 80) +
              "\"");
  }

  // A custom callback that stops the last rank alone, in a batch and then at
  // an epoch's end: every rank stops there (model_access::stop_agreed),
  // rather than the others waiting for its collectives to the deadline.
  struct stop_last_rank : tf::callback {
    std::int64_t at_batch = -1;  // -1: at the first epoch's end instead
    void on_batch_end(std::int64_t step, const tf::logs&) override {
      if (rank == workers - 1 && step == at_batch) model()->stop_training();
    }
    void on_epoch_end(const tf::epoch_info&, const tf::logs&) override {
      if (rank == workers - 1 && at_batch < 0) model()->stop_training();
    }
  };
  auto batches = data | tf::data::shard(workers, rank) | tf::data::batch<PerWorker>;
  for (const std::int64_t at_batch : {std::int64_t{3}, std::int64_t{-1}}) {
    tf::model<net, tf::float32, tf::multi_worker> stopped{4};
    compile(stopped);
    stop_last_rank stop;
    stop.at_batch = at_batch;
    const auto stopped_history = stopped.fit(batches, {.epochs = 3, .callbacks = {&stop}, .verbose = 0});
    const std::int64_t steps_per_epoch = samples / (PerWorker * workers);
    const std::int64_t expected = at_batch > 0 ? at_batch : steps_per_epoch;
    check(stopped.iterations() == expected && stopped_history["loss"].size() == 1,
          "a stop asked by the last rank alone (" + std::string(at_batch > 0 ? "in batch 3" : "at the epoch's end") +
              ") ends the fit there on every rank: " + std::to_string(stopped.iterations()) + " updates");
    check(same_on_every_rank(stopped.parameter_region()), "the stopped job's weights are identical on every rank");
  }
}

// A directory name shared by every rank of this job.
std::filesystem::path job_path(const std::string& stem) {
  long job = static_cast<long>(::getpid());
  MPI_Bcast(&job, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  return stem + "_" + std::to_string(job);
}

// This rank's own directory name.
std::filesystem::path own_path(const std::string& stem) { return stem + "_" + std::to_string(::getpid()); }

// The largest |a - b| / max(|a|, 1e-3) over two checkpoints' tensors (rank 0 reads them).
double largest_relative_gap(const std::filesystem::path& a, const std::filesystem::path& b) {
  const auto x = tf::io::read_checkpoint(a), y = tf::io::read_checkpoint(b);
  double worst = 0;
  for (const auto& name : tf::checkpoint_tensor_names(x)) {
    const auto p = tf::checkpoint_floats(x, name), q = tf::checkpoint_floats(y, name);
    if (p.size() != q.size()) return INFINITY;
    for (std::size_t i = 0; i < p.size(); ++i)
      worst = std::max(worst, std::fabs(double{p[i]} - q[i]) / std::max(std::fabs(double{p[i]}), 1e-3));
  }
  return worst;
}

// zero<Stage, multi_worker> and multi_worker trained alike: the weights on
// every rank and the optimizer's slots (gathered by save_checkpoint) are
// multi_worker's, bit for bit with up to two workers, else within `four`.
template <int Stage, int PerWorker, class Net = net, class Data, class Optimizer>
void check_zero_matches(const Data& shard, Optimizer optimizer, const char* name, double four = 1e-5) {
  tf::model<Net, tf::float32, tf::zero<Stage, tf::multi_worker>> sharded{4};
  tf::model<Net, tf::float32, tf::multi_worker> plain{4};
  compile(sharded, optimizer);
  compile(plain, optimizer);
  sharded.fit(shard, {.epochs = 1, .verbose = 0});
  plain.fit(shard, {.epochs = 1, .verbose = 0});
  const std::filesystem::path a = job_path("zero_test_a"), b = job_path("zero_test_b");
  sharded.save_checkpoint(a);  // every rank joins the slots' all-gathers; the chief writes
  plain.save_checkpoint(b);
  sharded.strategy().inner.barrier();
  check(same_on_every_rank(sharded.parameter_region()),
        std::string(name) + ": zero<" + std::to_string(Stage) + ">'s weights are identical on every rank");
  if (rank == 0) {
    const double gap = largest_relative_gap(a, b);
    const double limit = workers <= 2 ? 0.0 : four;
    char text[240];
    std::snprintf(text, sizeof text,
                  "%s: zero<%d, multi_worker> over %d worker(s) gives multi_worker's weights and slots: largest "
                  "relative gap %.3g (limit %g)",
                  name, Stage, workers, gap, limit);
    check(gap <= limit, text);
  }
  if constexpr (Stage == 3) {
    // Evaluation gathers the weights whole on every worker; a checkpoint
    // continues as the job that wrote it, bit for bit.
    const double theirs = plain.evaluate(shard)["loss"], ours = sharded.evaluate(shard)["loss"];
    check(workers <= 2 ? ours == theirs : std::fabs(ours - theirs) <= 1e-5 * std::fabs(theirs),
          std::string(name) + ": zero<3, multi_worker>'s evaluate gives multi_worker's loss (" + std::to_string(ours) +
              ", " + std::to_string(theirs) + ")");
    tf::model<Net, tf::float32, tf::zero<Stage, tf::multi_worker>> resumed{9};
    compile(resumed, optimizer);
    resumed.load_checkpoint(a);
    resumed.fit(shard, {.epochs = 1, .verbose = 0});
    sharded.fit(shard, {.epochs = 1, .verbose = 0});
    check(std::ranges::equal(resumed.parameter_region(), sharded.parameter_region()),
          std::string(name) + ": zero<3, multi_worker> continued from its checkpoint trains as the job that wrote it");
  }
  sharded.strategy().inner.barrier();
  if (rank == 0) {
    std::filesystem::remove_all(a);
    std::filesystem::remove_all(b);
  }
}

template <int PerWorker>
void zero_checks() {
  const auto data = full_data();
  auto shard = data | tf::data::shard(workers, rank) | tf::data::batch<PerWorker>;
  check_zero_matches<1, PerWorker>(shard, tf::optimizers::adam{}, "adam");
  check_zero_matches<2, PerWorker>(shard, tf::optimizers::adam{}, "adam");
  const tf::optimizers::sgd clipped{.learning_rate = 0.1, .momentum = 0.9f, .global_clipnorm = 0.5f};
  check_zero_matches<2, PerWorker>(shard, clipped, "sgd with momentum and global_clipnorm");
  const tf::optimizers::adamw ema{.learning_rate = 0.01, .use_ema = true, .ema_momentum = 0.9f};
  check_zero_matches<2, PerWorker>(shard, ema, "adamw with use_ema");
  // zero<3>: the weights sharded too, each layer's gathered for it (and a
  // repeat's copies one by one, through the combinator's hooks).
  check_zero_matches<3, PerWorker>(shard, tf::optimizers::adam{}, "adam");
  check_zero_matches<3, PerWorker>(shard, clipped, "sgd with momentum and global_clipnorm");
  check_zero_matches<3, PerWorker>(shard, ema, "adamw with use_ema");
  check_zero_matches<3, PerWorker, repeat_net>(shard, tf::optimizers::adam{}, "adam, repeat<3, dense<32>>");
  {
    // The callbacks that save or read the weights call on every worker (the
    // chief writes): under zero<3> gathering the weights is a collective.
    tf::model<net, tf::float32, tf::zero<3, tf::multi_worker>> m{4};
    compile(m);
    const std::filesystem::path dir = job_path("zero_test_callbacks");
    tf::callbacks::model_checkpoint each_epoch(dir / "ckpt", {.monitor = "loss"});
    tf::callbacks::model_checkpoint weights(dir / "weights.safetensors", {.monitor = "loss", .save_weights_only = true});
    tf::callbacks::tensorboard board(dir / "logs", {.histogram_freq = 1});
    // save_best_only decides on the epoch's logs, the job's means: alike on
    // every worker, so that each joins the save or none does.
    tf::callbacks::model_checkpoint best(dir / "best", {.monitor = "loss", .save_best_only = true});
    m.fit(shard | tf::data::take(2),
          {.epochs = 2, .callbacks = {&each_epoch, &weights, &board, &best}, .verbose = 0});
    m.strategy().inner.barrier();
    if (rank == 0)
      check(tf::io::list_checkpoints(dir / "ckpt").size() == 2 && std::filesystem::exists(dir / "weights.safetensors"),
            "zero<3, multi_worker>: model_checkpoint and tensorboard's histograms run on every worker, the chief "
            "writes two checkpoints and the weights");
    m.strategy().inner.barrier();
    if (rank == 0) std::filesystem::remove_all(dir);
  }
  {
    // zero<3>'s memory: a worker's weights, gradients and slots peak at its
    // shards and one layer's gathered weights and gradients, against
    // multi_worker's whole state on every worker.
    using deep = tf::sequential<tf::input<12>, tf::dense<256>, tf::relu, tf::repeat<6, tf::dense<256>>, tf::dense<4>>;
    tf::model<deep, tf::float32, tf::zero<3, tf::multi_worker>> sharded{4};
    tf::model<deep, tf::float32, tf::multi_worker> plain{4};
    compile(sharded);
    compile(plain);
    sharded.fit(shard | tf::data::take(2), {.epochs = 1, .verbose = 0});  // the window is learnt, then mapped
    plain.fit(shard | tf::data::take(2), {.epochs = 1, .verbose = 0});
    sharded.track_state_peaks();
    sharded.fit(shard | tf::data::take(2), {.epochs = 1, .verbose = 0});
    const std::size_t peak = sharded.peak_state_bytes(), whole = plain.resident_state_bytes();
    using plan = tf::rank_memory<decltype(sharded)::bound_network, tf::zero<3, tf::mirrored<2>>, PerWorker>;
    const std::size_t unit = plan::gathered_bytes;  // one dense<256>'s weights and gradients
    const std::size_t expected = whole / static_cast<std::size_t>(workers) + unit;
#if TYPEFLOW_ARENA_MREMAP
    check(peak <= expected + expected / 10 + 64 * 1024,
          "zero<3, multi_worker>'s worker peaks at " + std::to_string(peak) + " bytes of weights, gradients and "
              "slots: its shards and one layer's (" + std::to_string(expected) + " planned); multi_worker's hold " +
              std::to_string(whole));
    // zero<2>: the weights whole, and a shard of the gradients (one layer's
    // beyond it as backward goes) and of Adam's two slots.
    tf::model<deep, tf::float32, tf::zero<2, tf::multi_worker>> stage2{4};
    compile(stage2);
    stage2.fit(shard | tf::data::take(2), {.epochs = 1, .verbose = 0});
    stage2.track_state_peaks();
    stage2.fit(shard | tf::data::take(2), {.epochs = 1, .verbose = 0});
    const std::size_t quarter = whole / 4;  // the weights (multi_worker holds them, the gradients and two slots)
    const std::size_t expected2 = quarter + 3 * quarter / static_cast<std::size_t>(workers) + unit / 2;
    check(stage2.peak_state_bytes() <= expected2 + expected2 / 10 + 64 * 1024,
          "zero<2, multi_worker>'s worker peaks at " + std::to_string(stage2.peak_state_bytes()) +
              " bytes: the weights, its shards of the gradients and slots and one layer's gradients (" +
              std::to_string(expected2) + " planned)");
#else
    (void)peak, (void)expected;
    if (rank == 0)
      std::printf("zero<3, multi_worker>'s memory not measured: the arena is a heap block under AddressSanitizer, "
                  "whose freed pages are zeroed, not given back\n");
#endif
  }

  // Each worker's arena: the plan and two slots (adam's) of one shard each.
  using zero2 = tf::model<net, tf::float32, tf::zero<2, tf::multi_worker>>;
  zero2 model{4};
  compile(model);
  model.fit(shard | tf::data::take(1), {.epochs = 1, .verbose = 0});
  const std::size_t shard_bytes = tf::shard_length(zero2::bound_network::trainable_floats, workers) * sizeof(float);
  const std::size_t planned = tf::memory_plan<zero2::bound_network, PerWorker, 0>::total_bytes + 2 * shard_bytes;
  check(model.arena_bytes() >= planned && model.arena_bytes() < planned + 4096,
        "the arena holds the plan and two slots of " + std::to_string(shard_bytes) + " bytes: " +
            std::to_string(model.arena_bytes()) + " bytes, planned " + std::to_string(planned));
  std::string row;
  for (const auto& [what, value] : model.settings())
    if (what == "optimizer slots per replica") row = value;
  std::string digits = row.substr(0, row.find(" bytes each (2 slots: "));
  std::erase(digits, ',');
  check(digits == std::to_string(shard_bytes), "settings() gives each worker's slot shard: \"" + row + "\"");

  // A gradient that is not finite on the last worker only, in shard 0 (row 3
  // of layers.1.kernel): every worker refuses the step, none updates its shard.
  {
    zero2 poisoned{4};
    compile(poisoned);
    poisoned.train_on_batch(tf::testing::numbered_batch<PerWorker, 12, 4>(rank));
    const std::vector<float> before(poisoned.parameter_region().begin(), poisoned.parameter_region().end());
    auto bad = tf::testing::numbered_batch<PerWorker, 12, 4>(10 + rank);
    if (rank == workers - 1) bad.features[3] = NAN;  // its first sample's feature 3
    std::string refusal;
    try {
      poisoned.train_on_batch(bad);
    } catch (const tf::non_finite_error& e) {
      refusal = e.what();
    }
    check(refusal.find("the gradient of layers.1.kernel is not finite") != std::string::npos &&
              std::ranges::equal(poisoned.parameter_region(), before) && poisoned.iterations() == 1,
          "a gradient that is not finite on one worker stops the step on every worker: \"" +
              refusal.substr(0, 80) + "\"");
  }

  // A checkpoint written at step 13 continues bit for bit under zero<2>, and
  // loads into a single-process model and into zero<1, mirrored<2>>.
  auto shuffled = data | tf::data::shuffle(samples, 5) | tf::data::shard(workers, rank) | tf::data::batch<PerWorker>;
  const tf::optimizers::adam adam{.learning_rate = 0.01};
  zero2 whole{4}, first{4}, resumed{rank == 0 ? 77u : 78u};
  compile(whole, adam);
  compile(first, adam);
  compile(resumed, adam);
  whole.fit(shuffled, {.epochs = 2, .verbose = 0});
  const std::filesystem::path ckpt = job_path("zero_test_ckpt");
  tf::callbacks::lambda_callback stop_at_13({.on_train_batch_end = [&](std::int64_t, const tf::logs&) {
    if (first.iterations() != 13) return;
    first.save_checkpoint(ckpt);
    first.strategy().inner.barrier();  // written before any rank reads it
    throw std::runtime_error("stop");  // the same step on every rank
  }});
  try {
    first.fit(shuffled, {.epochs = 2, .callbacks = {&stop_at_13}, .verbose = 0});
  } catch (const std::runtime_error&) {
  }
  resumed.load_checkpoint(ckpt);
  resumed.fit(shuffled, {.epochs = 2, .verbose = 0});
  check(resumed.iterations() == whole.iterations() &&
            std::ranges::equal(resumed.parameter_region(), whole.parameter_region()),
        "zero<2, multi_worker> continued from a checkpoint ends with the uninterrupted job's weights, bit for bit");
  const auto written = tf::io::list_checkpoints(ckpt).back();
  const std::filesystem::path four = job_path("zero_test_four");
  if (rank == 0) {
    // Each worker wrote its shard of the slots, and nothing staged is left.
    const auto read = tf::io::read_checkpoint(written);
    bool staged_left = false;
    for (const auto& entry : std::filesystem::directory_iterator(ckpt))
      staged_left = staged_left || entry.path().filename().string().find(".part.") != std::string::npos;
    check(read.shards && read.shards->count() == workers && !read.tensors.find("optimizer.slot.0") && !staged_left,
          "zero<2, multi_worker>'s checkpoint holds one slot file per worker (" + std::to_string(workers) +
              "), the slots nowhere else, and no staged file is left");
    // The same state in one process, whole and in two and four in-process shards.
    tf::model<net> single{0};
    tf::model<net, tf::float32, tf::zero<1, tf::mirrored<2>>> in_process{0};
    tf::model<net, tf::float32, tf::zero<2, tf::mirrored<4>>> in_four{0};
    compile(single, adam);
    compile(in_process, adam);
    compile(in_four, adam);
    single.load_checkpoint(ckpt);
    in_process.load_checkpoint(ckpt);
    in_four.load_checkpoint(ckpt);
    const std::filesystem::path x = own_path("zero_test_x"), y = own_path("zero_test_y");
    check(tf::testing::same_tensors(single.save_checkpoint(x), written) &&
              tf::testing::same_tensors(in_process.save_checkpoint(y), written) &&
              tf::testing::same_tensors(in_four.save_checkpoint(four), written),
          "zero<2, multi_worker>'s checkpoint loads into one process and into zero<1, mirrored<2>> and zero<2, "
          "mirrored<4>>: the same weights and slots, bit for bit");
    std::filesystem::remove_all(x);
    std::filesystem::remove_all(y);
  }
  model.strategy().inner.barrier();
  // Four in-process shards into this job's workers, each reading the files
  // of its own shard, and written again by them.
  {
    zero2 from_four{5};
    compile(from_four, adam);
    from_four.load_checkpoint(four);
    const std::filesystem::path again = job_path("zero_test_again");
    from_four.save_checkpoint(again);
    model.strategy().inner.barrier();
    if (rank == 0)
      check(tf::testing::same_tensors(tf::io::list_checkpoints(again).back(), written),
            "zero<2, mirrored<4>>'s checkpoint loads into zero<2, multi_worker> and is written again by its workers "
            "bit for bit");
    model.strategy().inner.barrier();
    if (rank == 0) std::filesystem::remove_all(again);
  }
  // A corrupt shard file that only the last worker reads stops the load on
  // every worker, before any changes.
  if (rank == 0) {
    std::fstream f(tf::io::list_checkpoints(four).back() / tf::io::checkpoint_shard_name(3, 4),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char last = static_cast<char>(f.get());
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(last ^ 0x10));
  }
  model.strategy().inner.barrier();
  {
    zero2 victim{5};
    compile(victim, adam);
    victim.train_on_batch(tf::testing::numbered_batch<PerWorker, 12, 4>(rank));
    const std::vector<float> before(victim.parameter_region().begin(), victim.parameter_region().end());
    std::string refusal;
    try {
      victim.load_checkpoint(four);
    } catch (const std::runtime_error& e) {
      refusal = e.what();
    }
    const std::string expected = rank == workers - 1 ? "is corrupt" : "another worker failed";
    check(refusal.find(expected) != std::string::npos && victim.iterations() == 1 &&
              std::ranges::equal(victim.parameter_region(), before),
          "a shard file corrupt for the last worker alone stops load_checkpoint on every worker, changing nothing: \"" +
              refusal.substr(0, 100) + "\"");
  }
  model.strategy().inner.barrier();
  if (rank == 0) {
    std::filesystem::remove_all(ckpt);
    std::filesystem::remove_all(four);
  }
}

// Rank 1 fails at the end of its third step; rank 0 trains on.
struct fail_on_rank_1 : tf::callback {
  std::string_view mode;
  explicit fail_on_rank_1(std::string_view m) : mode(m) {}
  void on_batch_end(std::int64_t step, const tf::logs&) override {
    if (rank != 1 || step != 3) return;
    std::printf("[rank 1] failing now: %.*s\n", static_cast<int>(mode.size()), mode.data());
    std::fflush(stdout);
    if (mode == "stall") std::this_thread::sleep_for(std::chrono::minutes(10));
    if (mode == "throw") throw std::runtime_error("injected failure on rank 1");
    if (mode == "exit") std::exit(3);
    if (mode == "crash") ::raise(SIGKILL);
  }
};

template <int PerWorker>
int failure(std::string_view mode) {
  tf::model<net, tf::float32, tf::multi_worker> model{4};
  compile(model);
  auto shard = full_data() | tf::data::shard(workers, rank) | tf::data::batch<PerWorker>;
  if (mode.starts_with("finish-early") && rank == 1) {  // fewer batches than rank 0: returns 0 from main
    model.fit(shard | tf::data::take(3), {.epochs = 1, .verbose = 0});
    std::printf("[rank 1] finished after 3 steps and returns 0\n");
    std::fflush(stdout);
    return 0;
  }
  if (mode == "finish-early-peer-asleep") {  // rank 0: the same 3 steps, then asleep in no collective
    model.fit(shard | tf::data::take(3), {.epochs = 1, .verbose = 0});
    std::this_thread::sleep_for(std::chrono::minutes(10));
    return 0;
  }
  fail_on_rank_1 injector{mode == "stall-caught" ? "stall" : mode};
  if (mode == "stall-caught" && rank == 0) {  // rank 0 catches the timeout and returns 0: the job must still fail
    try {
      model.fit(shard, {.epochs = 20, .verbose = 0});
    } catch (const std::runtime_error& e) {
      std::printf("[rank 0] caught: %s\n", e.what());
      std::fflush(stdout);
      return 0;
    }
  }
  model.fit(shard, {.epochs = 20, .callbacks = {&injector}, .verbose = 0});
  std::printf("[rank %d] training finished, but rank 1 should have failed\n", rank);
  return 0;
}

template <int PerWorker>
int run(int argc, char** argv) {
  if (argc > 1) return failure<PerWorker>(argv[1]);
  checks<PerWorker>();
  zero_checks<PerWorker>();
  int total = failures;
  MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%s: %d failed checks over %d worker(s)\n", total ? "FAILED" : "PASSED", total, workers);
  return total == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  workers = tf::distribute::worker_count();  // starts MPI (singleton without mpirun)
  rank = tf::distribute::worker_index();
  if (argc > 2) tf::multi_worker::timeout = std::chrono::duration<double>(std::atof(argv[2]));
  switch (workers) {
    case 1: return run<global_batch>(argc, argv);
    case 2: return run<global_batch / 2>(argc, argv);
    case 4: return run<global_batch / 4>(argc, argv);
    default:
      std::fprintf(stderr, "multi_worker_test: run it with 1, 2 or 4 processes, not %d\n", workers);
      return 2;
  }
}

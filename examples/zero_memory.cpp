// Sharding the training state to fit a per-replica memory budget: the MNIST
// MLP with Adam on four replicas (threads), each allowed 17 MiB.
//
//   zero_memory [data/mnist] [steps]
//
// Under mirrored<4> replica 0 holds the weights, the gradients and both of
// Adam's slots whole: 30 MiB, so fit refuses before it allocates anything.
// zero<2, mirrored<4>> keeps a quarter of the slots and of the gradients on
// each replica (and one layer's gradients until they are reduced), but the
// weights whole: 17.9 MiB, refused too. Under zero<3,
// mirrored<4>> each replica keeps a quarter of the weights, gradients and
// slots, and gathers one layer's weights at a time (the largest, 1024 x
// 1024, with its gradients, is half of what it holds), so the same model
// trains within the budget, and to the same weights, bit for bit, as an
// unbudgeted mirrored<4>. Each replica's bytes are known at compile time
// (tf::rank_memory); the program prints them beside what each replica's
// weights, gradients and slots held in memory at their peak, measured in
// pages during the steps.
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <type_traits>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;
using namespace tf::literals;

using mlp = tf::sequential<tf::input<28, 28>, tf::flatten,
                           tf::dense<1024>, tf::relu,
                           tf::dense<1024>, tf::relu,
                           tf::dense<10>>;

constexpr int batch = 256;  // 64 per replica
using budget = tf::device_budget<17_MiB>;
using slots_sharded = tf::zero<2, tf::mirrored<4>>;
using sharded = tf::zero<3, tf::mirrored<4>>;
constexpr int adam_slots = 2;

// What the compiler knows of each strategy: one replica's bytes with Adam.
static_assert(tf::rank_memory<mlp, tf::mirrored<4>, batch>::bytes(adam_slots) > budget::bytes,
              "the example needs a model whose Adam state does not fit the budget unsharded");
static_assert(tf::rank_memory<mlp, slots_sharded, batch>::bytes(adam_slots) > budget::bytes,
              "the example needs a model that does not fit the budget with only its slots sharded");
static_assert(tf::rank_memory<mlp, sharded, batch>::bytes(adam_slots) <= budget::bytes,
              "the example needs a model that fits the budget under zero<3>");

double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// Each replica's weights, gradients and slots: the most held in memory during
// the steps (peak_state_bytes), against the plan's.
template <class Strategy, class Model>
void print_peaks(const char* name, const Model& model) {
  using memory = tf::rank_memory<mlp, Strategy, batch>;
  std::printf("%-22s weights, gradients and slots at their peak:", name);
  for (int r = 0; r < Strategy::replicas; ++r)
    std::printf(" replica %d %5.2f MiB%s", r, mib(model.peak_state_bytes(r)), r + 1 < Strategy::replicas ? "," : "");
  std::printf(" (planned: %.2f)\n", mib(memory::bytes(adam_slots) - memory::activation_bytes));
}

template <class Strategy>
void print_plan(const char* name) {
  using memory = tf::rank_memory<mlp, Strategy, batch>;
  std::printf("%-22s per replica: parameters %5.2f MiB, gradients %5.2f, Adam's slots %5.2f, gathered %5.2f, "
              "activations %4.2f: %5.2f MiB\n",
              name, mib(memory::parameter_bytes), mib(memory::gradient_bytes),
              mib(memory::bytes(adam_slots) - memory::bytes(0)), mib(memory::gathered_bytes),
              mib(memory::activation_bytes), mib(memory::bytes(adam_slots)));
}

// Trains under Strategy within the budget; true when fit refused before the first step.
template <class Strategy>
bool refused(const char* name, const std::string& dir, int steps);

// A fresh pipeline per run, so that both see the same batches in the same order.
auto mnist_train(const std::string& dir) {
  return tf::data::mnist(dir, tf::data::split::train) | tf::data::map(tf::data::scale(1.f / 255)) |
         tf::data::shuffle(60'000, /*seed=*/42) | tf::data::batch<batch>;
}

template <class Model>
void compile(Model& model) {
  model.compile(tf::optimizers::adam{.learning_rate = 1e-3},
                tf::losses::sparse_categorical_crossentropy{.from_logits = true}, tf::metrics::accuracy{});
}

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : "data/mnist";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 60;
  std::printf("budget: %.0f MiB per replica\n", mib(budget::bytes));
  print_plan<tf::mirrored<4>>("mirrored<4>");
  print_plan<slots_sharded>("zero<2, mirrored<4>>");
  print_plan<sharded>("zero<3, mirrored<4>>");

  // 1. Unsharded, and with only the slots sharded, within the budget: refused before the first step.
  if (!refused<tf::mirrored<4>>("mirrored<4>", dir, steps) ||
      !refused<slots_sharded>("zero<2, mirrored<4>>", dir, steps))
    return 1;

  // 2. Everything sharded, within the same budget: trains.
  tf::model<mlp, tf::float32, sharded, tf::cpu, budget> model{/*seed=*/7};
  compile(model);
  model.track_state_peaks();
  const tf::history sharded_history = model.fit(mnist_train(dir), {.epochs = 1, .steps_per_epoch = steps});
  print_peaks<sharded>("zero<3, mirrored<4>>", model);

  // 3. The unsharded run without a budget, for the answer it gives.
  tf::model<mlp, tf::float32, tf::mirrored<4>> reference{/*seed=*/7};
  compile(reference);
  const tf::history reference_history = reference.fit(mnist_train(dir), {.epochs = 1, .verbose = 0, .steps_per_epoch = steps});
  print_peaks<tf::mirrored<4>>("mirrored<4>, no budget", reference);

  const auto a = model.get_weights(), b = reference.get_weights();
  std::size_t differing = 0, total = 0;
  for (std::size_t t = 0; t < a.size(); ++t)
    for (std::size_t i = 0; i < a[t].values.size(); ++i, ++total)
      differing += std::bit_cast<std::uint32_t>(a[t].values[i]) != std::bit_cast<std::uint32_t>(b[t].values[i]);
  const double loss = sharded_history["loss"].back(), reference_loss = reference_history["loss"].back();
  std::printf("loss after %d steps: %.6f sharded, %.6f unsharded; %zu of %zu weights differ\n", steps, loss,
              reference_loss, differing, total);
  if (differing != 0 || loss != reference_loss) {
    std::fprintf(stderr, "zero_memory: the sharded run did not give the unsharded run's weights\n");
    return 1;
  }
  std::printf("same weights, bit for bit\n");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "zero_memory: %s\n", e.what());
  return 1;
}

template <class Strategy>
bool refused(const char* name, const std::string& dir, int steps) {
  tf::model<mlp, tf::float32, Strategy, tf::cpu, budget> model{/*seed=*/7};
  compile(model);
  try {
    model.fit(mnist_train(dir), {.epochs = 1, .verbose = 0, .steps_per_epoch = steps});
  } catch (const std::invalid_argument& e) {
    std::printf("%s with the budget: refused (%s)\n", name, e.what());
    return true;
  }
  std::fprintf(stderr, "zero_memory: %s trained over its budget\n", name);
  return false;
}

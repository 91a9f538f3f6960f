// Sharding the optimizer's state to fit a per-replica memory budget: the
// MNIST MLP with Adam on four replicas (threads), each allowed 24 MiB.
//
//   zero_memory [data/mnist] [steps]
//
// Under mirrored<4> replica 0 holds the weights, the gradients and both of
// Adam's slots whole: more than 24 MiB, so fit refuses before it allocates
// anything. Under zero<2, mirrored<4>> each replica keeps a quarter of the
// slots (and updates only that quarter), so the same model trains within the
// budget, and to the same weights, bit for bit, as an unbudgeted mirrored<4>.
// Each replica's bytes are known at compile time (tf::rank_memory); the
// program prints them beside the arena each replica holds after training.
//
// (Stage 3, sharding the weights themselves, is not built yet: the weights
// and the gradients the backward pass writes stay whole on every replica.)
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
using budget = tf::device_budget<24_MiB>;
using sharded = tf::zero<2, tf::mirrored<4>>;
constexpr int adam_slots = 2;

// What the compiler knows of each strategy: one replica's bytes with Adam.
static_assert(tf::rank_memory<mlp, tf::mirrored<4>, batch>::bytes(adam_slots) > budget::bytes,
              "the example needs a model whose Adam state does not fit the budget unsharded");
static_assert(tf::rank_memory<mlp, sharded, batch>::bytes(adam_slots) <= budget::bytes,
              "the example needs a model that fits the budget under zero<2>");

double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

template <class Model>
void print_arenas(const char* name, const Model& model, std::size_t planned) {
  constexpr int replicas = std::remove_cvref_t<decltype(model.strategy())>::replicas;
  std::printf("%-26s held:", name);
  for (int r = 0; r < replicas; ++r)
    std::printf(" replica %d %5.1f MiB%s", r, mib(model.arena_bytes(r)), r + 1 < replicas ? "," : "");
  std::printf(" (planned for the fullest: %.1f)\n", mib(planned));
}

template <class Strategy>
void print_plan(const char* name) {
  using memory = tf::rank_memory<mlp, Strategy, batch>;
  std::printf("%-26s per replica: parameters %5.1f MiB, gradients %5.1f, Adam's slots %5.1f, activations %4.1f: "
              "%5.1f MiB\n",
              name, mib(memory::parameter_bytes), mib(memory::gradient_bytes),
              mib(memory::bytes(adam_slots) - memory::bytes(0)), mib(memory::activation_bytes),
              mib(memory::bytes(adam_slots)));
}

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
  print_plan<sharded>("zero<2, mirrored<4>>");

  // 1. Unsharded, within the budget: refused before the first step.
  {
    tf::model<mlp, tf::float32, tf::mirrored<4>, tf::cpu, budget> model{/*seed=*/7};
    compile(model);
    try {
      model.fit(mnist_train(dir), {.epochs = 1, .verbose = 0, .steps_per_epoch = steps});
      std::fprintf(stderr, "zero_memory: mirrored<4> trained over its budget\n");
      return 1;
    } catch (const std::invalid_argument& e) {
      std::printf("mirrored<4> with the budget: refused (%s)\n", e.what());
    }
  }

  // 2. Sharded, within the same budget: trains.
  tf::model<mlp, tf::float32, sharded, tf::cpu, budget> model{/*seed=*/7};
  compile(model);
  const tf::history sharded_history = model.fit(mnist_train(dir), {.epochs = 1, .steps_per_epoch = steps});

  // 3. The unsharded run without a budget, for the answer it gives.
  tf::model<mlp, tf::float32, tf::mirrored<4>> reference{/*seed=*/7};
  compile(reference);
  const tf::history reference_history = reference.fit(mnist_train(dir), {.epochs = 1, .verbose = 0, .steps_per_epoch = steps});
  print_arenas("zero<2, mirrored<4>>", model, tf::rank_memory<mlp, sharded, batch>::bytes(adam_slots));
  print_arenas("mirrored<4>, no budget", reference, tf::rank_memory<mlp, tf::mirrored<4>, batch>::bytes(adam_slots));

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

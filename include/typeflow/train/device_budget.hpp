// device_budget<Bytes>: the memory one device may give a model, checked by
// the compiler against the model's memory plan (model/memory_plan.hpp):
//
//   tf::model<gpt2, tf::mixed_bfloat16, tf::single_device, tf::cuda, tf::device_budget<80 * tf::GiB>> m;
//
// At each batch size the model is given (fit, train_on_batch, evaluate,
// predict), the bytes one replica holds (distribute/rank_memory.hpp: the
// parameters, gradients, activations, workspaces, scratch and loss rows of
// its share of the batch) must fit the budget, or the program does not
// compile; the error's one line names each part and both totals:
// 'budget_check<parameter_bytes<P>, gradient_bytes<G>, gathered_bytes<X>,
// activation_bytes<A>, plan bytes, budget bytes, false>::passed'. The
// optimizer's slots are known only when compile() runs: fit and
// train_on_batch check them with the rest before the first step, with an
// exception giving the same numbers and the slots' bytes. Under
// zero<k> a replica's slots are its shard's, so a model whose slots fit only
// when sharded trains there and is refused under mirrored<N>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "typeflow/distribute/rank_memory.hpp"
#include "typeflow/model/memory_plan.hpp"

namespace typeflow {

inline constexpr std::uint64_t KiB = std::uint64_t{1} << 10;
inline constexpr std::uint64_t MiB = std::uint64_t{1} << 20;
inline constexpr std::uint64_t GiB = std::uint64_t{1} << 30;

inline namespace literals {
consteval std::uint64_t operator""_MiB(unsigned long long n) { return n * MiB; }
consteval std::uint64_t operator""_GiB(unsigned long long n) { return n * GiB; }
}  // namespace literals

template <std::uint64_t Bytes>
struct device_budget {
  static_assert(Bytes > 0, "device_budget<Bytes>: the budget must be more than 0 bytes");
  static constexpr std::uint64_t bytes = Bytes;
};
// The default: nothing is checked.
struct no_device_budget {
  static constexpr std::uint64_t bytes = 0;
};

template <class T>
inline constexpr bool is_device_budget_v = false;
template <std::uint64_t Bytes>
inline constexpr bool is_device_budget_v<device_budget<Bytes>> = true;
template <>
inline constexpr bool is_device_budget_v<no_device_budget> = true;

// The parts of a replica's plan, named in the compiler's error.
template <std::uint64_t Bytes>
struct parameter_bytes {};
template <std::uint64_t Bytes>
struct gradient_bytes {};
template <std::uint64_t Bytes>
struct gathered_bytes {};
template <std::uint64_t Bytes>
struct activation_bytes {};

// The check whose name carries the numbers into the compiler's error: each
// part, then the plan's total and the budget.
template <class Parameters, class Gradients, class Gathered, class Activations, std::uint64_t PlanBytes,
          std::uint64_t BudgetBytes, bool Fits>
struct budget_check {
  static constexpr bool passed = Fits;
};

// One replica's bytes (a rank_memory), with `slots` optimizer slots,
// against Budget: at compile time without the slots, at run time
// (check_slots) with them.
template <class Budget, class Memory>
struct budget_of_plan {
  static constexpr bool checked = Budget::bytes > 0;
  static constexpr std::uint64_t bytes = Memory::bytes_before_slots;

  static void check_slots(int slots, const char* where) {
    if constexpr (checked) {
      const std::uint64_t with_slots = Memory::bytes(slots);
      if (with_slots > Budget::bytes) {
        const std::pair<const char*, std::uint64_t> parts[] = {
            {"parameters", Memory::parameter_bytes},
            {"gradients", Memory::gradient_bytes},
            {"optimizer slots", static_cast<std::uint64_t>(slots) * Memory::slot_bytes},
            {"gathered", Memory::gathered_bytes},
            {"activations", Memory::activation_bytes}};
        std::string each;
        const auto* largest = &parts[0];
        for (const auto& part : parts) {
          if (part.second == 0) continue;
          each += (each.empty() ? "" : ", ") + std::string(part.first) + " " + std::to_string(part.second);
          if (part.second > largest->second) largest = &part;
        }
        throw std::invalid_argument(std::string(where) + ": the memory plan for this batch size needs " +
                                    std::to_string(with_slots) + " bytes per device with the optimizer's " +
                                    std::to_string(slots) + " slots (" + each + "; the largest: " + largest->first +
                                    "); the model's device_budget is " + std::to_string(Budget::bytes) +
                                    " bytes. Nothing was allocated");
      }
    }
  }
};

// What one replica of Net holds at global batch size N under Strategy
// (each replica takes its share of the batch; under zero<k> its shard of the
// slots), against Budget: without the optimizer's slots at compile time, with
// them (`slots`) at run time, before fit, train_on_batch, evaluate or
// predict allocates anything.
template <class Budget, class Net, int N, class Strategy, class Device = cpu>
void check_device_budget(int slots, const char* where) {
  if constexpr (Budget::bytes > 0) {
    using memory = rank_memory<Net, Strategy, N, Device>;
    using budget = budget_of_plan<Budget, memory>;
    static_assert(budget_check<parameter_bytes<memory::parameter_bytes>, gradient_bytes<memory::gradient_bytes>,
                               gathered_bytes<memory::gathered_bytes>, activation_bytes<memory::activation_bytes>,
                               budget::bytes, Budget::bytes, budget::bytes <= Budget::bytes>::passed,
                  "model<..., device_budget<Bytes>>: the memory plan for this batch size exceeds the budget: "
                  "budget_check gives each part's bytes per device, then their total (before the optimizer's slots) "
                  "and the budget; use a smaller batch, recompute<> blocks, mirrored<N> or zero<k, ...>");
    budget::check_slots(slots, where);
  }
}

}  // namespace typeflow

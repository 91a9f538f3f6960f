// program_slot: the one step program an arena holds at a time.
//
// A step program is a type per batch size (step_program<Net, N, Device>), and
// its memory plan lays the step region out for that size, so an engine or a
// replica keeps one at a time and sets another up when the batch size
// changes. The slot remembers which (a marker: the batch size, or another
// number for the decoder's program). set_up() is how every owner (the CPU
// engine, a CPU replica, a GPU replica) gets its program: the one held, or a
// new one after the arena has grown to the program's plan; how the arena
// grows (host pages, a device block) is the owner's.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

namespace typeflow {

class program_slot {
 public:
  // The program held, if it was set up under `marker`; else nullptr.
  template <class Program>
  Program* find(int marker) const {
    return program_ && marker_ == marker ? static_cast<Program*>(program_.get()) : nullptr;
  }
  // The program held (set up under any marker, of type Program).
  template <class Program>
  Program& get() const {
    return *static_cast<Program*>(program_.get());
  }
  // Drops the held program first (its executors may own device resources),
  // then sets up Program(args...) under `marker`.
  template <class Program, class... Args>
  Program& emplace(int marker, Args&&... args) {
    reset();
    program_ = std::make_shared<Program>(std::forward<Args>(args)...);
    marker_ = marker;
    return get<Program>();
  }
  // The Program held under `marker`, else a new one: prepare_arena(bytes,
  // keep) first makes the arena at least `bytes` long keeping its first
  // `keep` (the weights, gradients and slots below step_base), drops what
  // the owner keeps of the old program, and returns the arena's start (it
  // may have moved); then Program(arena, step_base, context, run).
  template <class Program, class PrepareArena, class Context, class Run>
  Program& set_up(int marker, std::size_t step_base, PrepareArena&& prepare_arena, Context& context, const Run& run) {
    if (Program* held = find<Program>(marker)) return *held;
    reset();
    std::byte* arena = prepare_arena(step_base + Program::plan::per_step_bytes, step_base);
    return emplace<Program>(marker, arena, step_base, context, run);
  }
  void reset() {
    program_.reset();
    marker_ = 0;
  }

 private:
  std::shared_ptr<void> program_;  // type-erased: one type per batch size
  int marker_ = 0;
};

}  // namespace typeflow

// program_slot: the one step program an arena holds at a time.
//
// A step program is a type per batch size (step_program<Net, N, Device>), and
// its memory plan lays the step region out for that size, so an engine or a
// replica keeps one at a time and sets another up when the batch size
// changes. The slot remembers which (a marker: the batch size, or another
// number for the decoder's program); what setting one up involves (growing
// the arena, the device's buffers) is the owner's.
#pragma once

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
  void reset() {
    program_.reset();
    marker_ = 0;
  }

 private:
  std::shared_ptr<void> program_;  // type-erased: one type per batch size
  int marker_ = 0;
};

}  // namespace typeflow

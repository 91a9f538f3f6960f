// map(f), map(f, num_parallel_calls): a stage whose elements are f(element),
// like tf.data's Dataset.map.
//
//   source | map(f)         element_type = std::decay_t<decltype(f(source element))>
//   source | map(f, n)      the same elements in the same order, f run by n worker threads
//   source | map(f, autotune)   one worker per hardware thread
//
// The new element type is deduced at compile time. f is called with the
// source element as a const lvalue, so it may take it by value or by const&.
// If it cannot be called with the stage's element type, the compiler says so
// in one static_assert before anything else.
//
// With num_parallel_calls, open() starts n threads. They take the source's
// elements one at a time, in order, and call f concurrently on different
// elements, so f must be safe to call from several threads at once (a lambda
// that only reads its captures is). The output keeps the input's order
// whatever the timing: element i goes to slot i of a ring of 2n + 2 slots,
// and next() hands the slots over in sequence, so a parallel map is as
// deterministic as a sequential one. An exception thrown by f or by the
// source in a worker is caught there and rethrown, the same object, from
// the next() that reaches that element's place; the elements before it are
// delivered first. Destroying the cursor stops the workers and joins them;
// it waits at most for the calls of f already running. Workers never preempt
// the training step when they wake (background_thread.hpp).
//
// scale(factor): for map. Turns example<tensor_value<T, S>, Label> (any
// arithmetic T) into example<tensor_value<float, S>, Label> with every feature
// multiplied by factor, e.g. map(scale(1.f / 255)) for pixels in [0, 1].
#pragma once

#include <algorithm>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "typeflow/data/background_thread.hpp"
#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"

namespace typeflow::data {

namespace detail {

// The workers and slots of one parallel map pass. It lives on the heap, owned
// by the cursor, so that the threads' `this` stays valid when the cursor moves.
//
// Locks: input_mutex_ serialises reading the source (and claiming a sequence
// number, so that element i lands in slot i); mutex_ guards the slots' flags
// and the counters. A worker takes input_mutex_ then mutex_; the consumer
// only mutex_.
template <class SourceCursor, class Input, class Output, class F>
class parallel_map_state {
 public:
  parallel_map_state(SourceCursor source, const F& function, int workers)
      : source_(std::move(source)), function_(function), slots_(2 * static_cast<std::size_t>(workers) + 2) {
    threads_.reserve(static_cast<std::size_t>(workers));
    try {
      for (int i = 0; i < workers; ++i) threads_.push_back(background_thread([this] { work(); }));
    } catch (...) {
      stop_and_join();
      throw;
    }
  }
  ~parallel_map_state() { stop_and_join(); }
  parallel_map_state(const parallel_map_state&) = delete;
  parallel_map_state& operator=(const parallel_map_state&) = delete;

  bool next(Output& out) {
    if (finished_) return false;
    std::unique_lock lock(mutex_);
    slot& current = slots_[consumed_ % slots_.size()];
    ready_.wait(lock, [&] { return current.done || (input_ended_ && consumed_ >= end_sequence_); });
    if (!current.done) {
      finished_ = true;
      return false;
    }
    lock.unlock();
    if (current.error) {
      finished_ = true;
      const std::exception_ptr error = current.error;
      stop_and_join();
      std::rethrow_exception(error);
    }
    hand_over(current.output, out);
    lock.lock();
    current.done = false;
    ++consumed_;
    lock.unlock();
    free_slot_.notify_all();
    return true;
  }

 private:
  struct slot {
    Input input{};
    Output output{};
    std::exception_ptr error;
    bool done = false;  // output (or error) is ready for the consumer
  };

  void work() {
    for (;;) {
      slot* claimed = nullptr;
      {
        std::unique_lock input_lock(input_mutex_);
        std::uint64_t sequence = 0;
        {
          std::unique_lock lock(mutex_);
          free_slot_.wait(lock, [&] { return stop_ || input_ended_ || next_sequence_ - consumed_ < slots_.size(); });
          if (stop_ || input_ended_) return;
          sequence = next_sequence_++;
        }
        claimed = &slots_[sequence % slots_.size()];
        bool got = false;
        try {
          got = source_.next(claimed->input);
        } catch (...) {
          claimed->error = std::current_exception();
        }
        if (!got) {
          std::unique_lock lock(mutex_);
          input_ended_ = true;
          end_sequence_ = claimed->error ? sequence + 1 : sequence;  // an error is delivered in its place
          claimed->done = claimed->error != nullptr;
          lock.unlock();
          ready_.notify_all();
          free_slot_.notify_all();  // idle workers see the end
          return;
        }
      }
      try {
        claimed->output = std::invoke(std::as_const(function_), std::as_const(claimed->input));
      } catch (...) {
        claimed->error = std::current_exception();
      }
      {
        std::lock_guard lock(mutex_);
        claimed->done = true;
      }
      ready_.notify_all();
    }
  }

  void stop_and_join() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    free_slot_.notify_all();
    ready_.notify_all();
    for (std::thread& thread : threads_)
      if (thread.joinable()) thread.join();
  }

  SourceCursor source_;   // read under input_mutex_ only
  const F function_;      // called concurrently, as const
  std::vector<slot> slots_;
  std::vector<std::thread> threads_;

  std::mutex input_mutex_;
  std::mutex mutex_;
  std::condition_variable ready_;      // a slot became done, or the input ended
  std::condition_variable free_slot_;  // a slot was handed over, or stop
  std::uint64_t next_sequence_ = 0;    // the next element a worker claims
  std::uint64_t consumed_ = 0;         // elements handed to the consumer
  std::uint64_t end_sequence_ = 0;     // valid once input_ended_: how many elements there are
  bool input_ended_ = false;
  bool stop_ = false;
  bool finished_ = false;  // consumer side only
};

inline int resolve_parallel_calls(int requested) {
  if (requested == autotune) return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return requested;
}

}  // namespace detail

template <dataset Source, class F>
class map_dataset {
 public:
  using source_element = typename Source::element_type;
  using element_type = std::decay_t<std::invoke_result_t<const F&, const source_element&>>;

  // num_parallel_calls 0: f runs in the consumer's thread, inside next().
  map_dataset(Source source, F function, int num_parallel_calls = 0)
      : source_(std::move(source)), function_(std::move(function)), num_parallel_calls_(num_parallel_calls) {}

  std::int64_t cardinality() const { return source_.cardinality(); }
  int num_parallel_calls() const noexcept { return num_parallel_calls_; }
  // A sequential map over a random-access source is one: read_at(i) is f(source[i]).
  bool random_access() const
    requires random_access_dataset<Source>
  {
    return num_parallel_calls_ == 0 && source_.random_access();
  }

  class cursor {
   public:
    bool next(element_type& out) {
      if (parallel_) return parallel_->next(out);
      if (!source_->next(input_)) return false;
      out = std::invoke(std::as_const(function_), std::as_const(input_));  // as checked: const f, const element
      return true;
    }

    // f(source element `index`); only for a sequential map (random_access() true).
    void read_at(std::int64_t index, element_type& out)
      requires random_access_dataset<Source>
    {
      source_->read_at(index, input_);
      out = std::invoke(std::as_const(function_), std::as_const(input_));
    }

   private:
    friend class map_dataset;
    using parallel_state = detail::parallel_map_state<cursor_t<Source>, source_element, element_type, F>;

    cursor(cursor_t<Source> source, F function, int workers) : function_(std::move(function)) {
      if (workers > 0)
        parallel_ = std::make_unique<parallel_state>(std::move(source), function_, workers);
      else
        source_.emplace(std::move(source));
    }

    std::optional<cursor_t<Source>> source_;  // sequential only
    F function_;
    source_element input_{};  // the source's element, filled in place (sequential only)
    std::unique_ptr<parallel_state> parallel_;
  };

  cursor open(std::uint64_t epoch = 0) const {
    return cursor(source_.open(epoch), function_, detail::resolve_parallel_calls(num_parallel_calls_));
  }

 private:
  Source source_;
  F function_;
  int num_parallel_calls_;
};

template <class F>
struct map_adaptor {
  static constexpr bool is_pipeline_adaptor = true;
  F function;
  int num_parallel_calls = 0;

  template <dataset Source>
  auto operator()(Source source) const {
    using element = typename Source::element_type;
    // Traits, not concepts, in the asserts: g++ would follow a failed concept
    // with notes on why, and the sentence should stand alone.
    constexpr bool callable = std::is_invocable_v<const F&, const element&>;
    if constexpr (!callable) {
      static_assert(callable,
                    "map(f): the function cannot be called with this stage's element type; "
                    "f must accept the previous stage's element_type (e.g. an example<features, label>) "
                    "by value or by const&");
      return source;
    } else if constexpr (std::is_void_v<std::invoke_result_t<const F&, const element&>>) {
      static_assert(dependent_false<Source>,
                    "map(f): the function returns void; it must return the new element");
      return source;
    } else {
      return map_dataset<Source, F>(std::move(source), function, num_parallel_calls);
    }
  }
};

template <class F>
map_adaptor<std::decay_t<F>> map(F&& function) {
  return {std::forward<F>(function), 0};
}

// Throws std::invalid_argument unless num_parallel_calls >= 1 or autotune.
template <class F>
map_adaptor<std::decay_t<F>> map(F&& function, int num_parallel_calls) {
  if (num_parallel_calls < 1 && num_parallel_calls != autotune)
    throw std::invalid_argument("map(f, num_parallel_calls): num_parallel_calls must be at least 1, or autotune; got " +
                                std::to_string(num_parallel_calls));
  return {std::forward<F>(function), num_parallel_calls};
}

// scale(factor): see the top of this file.
struct scale {
  float factor;

  constexpr explicit scale(float multiply_by) noexcept : factor(multiply_by) {}

  template <class T, class Shape, class Label>
    requires std::is_arithmetic_v<T>
  example<tensor_value<float, Shape>, Label> operator()(const example<tensor_value<T, Shape>, Label>& in) const noexcept {
    example<tensor_value<float, Shape>, Label> out;
    for (std::size_t i = 0; i < Shape::size; ++i) out.features[i] = static_cast<float>(in.features[i]) * factor;
    out.label = in.label;
    return out;
  }
};

}  // namespace typeflow::data

// prefetch(k): runs the pipeline before it on a background thread, up to k
// elements ahead of the consumer, like tf.data's Dataset.prefetch.
//
//   source | prefetch(k)          element_type and cardinality: the source's
//   source | prefetch(autotune)   k = 2
//
// open() starts one producer thread that fills a ring of k preallocated
// slots from the source; next() waits only when the ring is empty, so while
// the consumer runs a training step the next batches are being made. The
// slots are handed over without allocating (detail::hand_over): examples are
// copied, a batch_of is swapped with the consumer's batch, whose vectors go
// back into the ring to be refilled in place. Elements come out in the
// source's order.
//
// An exception thrown by the source in the producer thread is caught there
// and rethrown, the same object, from the consumer's next() once the elements
// made before it have been delivered. Destroying the cursor (mid-epoch
// included) stops the producer and joins it; it waits at most for the one
// source.next() call in progress. The thread never preempts the training
// step when it wakes (background_thread.hpp).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "typeflow/data/background_thread.hpp"
#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"

namespace typeflow::data {

namespace detail {

// The producer thread and its ring, on the heap so that the cursor can move.
// The producer owns the slot at tail_ while it fills it; the consumer owns
// the filled_ slots from head_. Only filled_ and the flags are shared.
template <class SourceCursor, class Element>
class prefetch_state {
 public:
  prefetch_state(SourceCursor source, std::size_t slots) : source_(std::move(source)), slots_(slots) {
    producer_ = background_thread([this] { produce(); });
  }
  ~prefetch_state() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    space_.notify_one();
    producer_.join();
  }
  prefetch_state(const prefetch_state&) = delete;
  prefetch_state& operator=(const prefetch_state&) = delete;

  bool next(Element& out) {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return filled_ > 0 || ended_; });
    if (filled_ == 0) {
      if (error_) std::rethrow_exception(std::exchange(error_, nullptr));  // once; then the end
      return false;
    }
    lock.unlock();
    hand_over(slots_[head_], out);
    head_ = (head_ + 1) % slots_.size();
    lock.lock();
    --filled_;
    lock.unlock();
    space_.notify_one();
    return true;
  }

 private:
  void produce() {
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        space_.wait(lock, [&] { return stop_ || filled_ < slots_.size(); });
        if (stop_) return;
      }
      bool got = false;
      std::exception_ptr error;
      try {
        got = source_.next(slots_[tail_]);
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard lock(mutex_);
        if (got) {
          ++filled_;
        } else {
          // Moved, not copied: the consumer must hold the last reference, or
          // this thread frees the exception while the consumer still reads it
          // (safe through libstdc++'s atomics, which ThreadSanitizer cannot see).
          error_ = std::move(error);
          ended_ = true;
        }
      }
      ready_.notify_one();
      if (!got) return;
      tail_ = (tail_ + 1) % slots_.size();
    }
  }

  SourceCursor source_;  // producer thread only
  std::vector<Element> slots_;
  std::size_t head_ = 0;  // consumer only
  std::size_t tail_ = 0;  // producer only

  std::mutex mutex_;
  std::condition_variable ready_;  // a slot was filled, or the source ended
  std::condition_variable space_;  // a slot was emptied, or stop
  std::size_t filled_ = 0;
  bool ended_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread producer_;  // last: started once everything above exists
};

}  // namespace detail

template <dataset Source>
class prefetch_dataset {
 public:
  using element_type = typename Source::element_type;

  prefetch_dataset(Source source, std::size_t buffer_size) : source_(std::move(source)), buffer_size_(buffer_size) {}

  std::int64_t cardinality() const { return source_.cardinality(); }
  // full_batches() of a batch stage passes through, so fit counts its steps.
  std::int64_t full_batches() const
    requires requires(const Source& s) { s.full_batches(); }
  {
    return source_.full_batches();
  }
  std::size_t buffer_size() const noexcept { return buffer_size_; }

  class cursor {
   public:
    bool next(element_type& out) { return state_->next(out); }

   private:
    friend class prefetch_dataset;
    explicit cursor(std::unique_ptr<detail::prefetch_state<cursor_t<Source>, element_type>> state)
        : state_(std::move(state)) {}
    std::unique_ptr<detail::prefetch_state<cursor_t<Source>, element_type>> state_;
  };

  cursor open(std::uint64_t epoch = 0) const {
    return cursor(
        std::make_unique<detail::prefetch_state<cursor_t<Source>, element_type>>(source_.open(epoch), buffer_size_));
  }

 private:
  Source source_;
  std::size_t buffer_size_;
};

struct prefetch_adaptor {
  static constexpr bool is_pipeline_adaptor = true;
  std::size_t buffer_size;

  template <dataset Source>
  prefetch_dataset<Source> operator()(Source source) const {
    return prefetch_dataset<Source>(std::move(source), buffer_size);
  }
};

// Throws std::invalid_argument unless buffer_size >= 1 or autotune.
inline prefetch_adaptor prefetch(int buffer_size) {
  if (buffer_size == autotune) return {2};
  if (buffer_size < 1)
    throw std::invalid_argument("prefetch(buffer_size): buffer_size must be at least 1, or autotune; got " +
                                std::to_string(buffer_size));
  return {static_cast<std::size_t>(buffer_size)};
}

}  // namespace typeflow::data

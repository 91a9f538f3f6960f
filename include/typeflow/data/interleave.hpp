// interleave(f, cycle_length, block_length): reads several datasets made from
// the source's elements in turn, like tf.data's Dataset.interleave; the usual
// use is several files read together:
//
//   from_values(paths) | interleave([](const std::filesystem::path& p) { return text_file(p); },
//                                   /*cycle_length=*/4, /*block_length=*/16)
//
//   element_type: that of the datasets f returns; cardinality: unknown (-1)
//
// The same order as tf.data's (deterministic): cycle_length slots are visited
// in turn, and block_length elements are taken from a slot's dataset before
// moving to the next slot. An empty slot is given the dataset of the next
// source element when the turn comes to it; a dataset that ends leaves its
// slot empty and the turn moves on. The pass ends when the source and every
// slot are exhausted. Every dataset is opened at the pass's epoch.
//
// f is called with a source element as a const lvalue and must return a
// dataset; anything else is a compile error with one sentence. The slots are
// made at open(); a dataset and its cursor are created when a slot is filled
// (once per source element, e.g. per file), never per element read.
// cycle_length or block_length below 1 throw std::invalid_argument.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"

namespace typeflow::data {

template <dataset Source, class F>
class interleave_dataset {
 public:
  using source_element = typename Source::element_type;
  using inner_dataset = std::decay_t<std::invoke_result_t<const F&, const source_element&>>;
  using element_type = typename inner_dataset::element_type;

  interleave_dataset(Source source, F function, int cycle_length, int block_length)
      : source_(std::move(source)),
        function_(std::move(function)),
        cycle_length_(cycle_length),
        block_length_(block_length) {}

  std::int64_t cardinality() const { return source_.cardinality() == 0 ? 0 : unknown_cardinality; }

  class cursor {
   public:
    bool next(element_type& out) {
      while (open_slots_ > 0 || !source_ended_) {
        std::optional<slot>& current = slots_[cycle_index_];
        if (current) {
          if (current->reader.next(out)) {
            if (++block_index_ == block_length_) advance();
            return true;
          }
          current.reset();
          --open_slots_;
          advance();
        } else if (!source_ended_) {
          if (source_.next(input_)) {
            current.emplace(std::invoke(std::as_const(function_), std::as_const(input_)), epoch_);
            ++open_slots_;
          } else {
            source_ended_ = true;
          }
        } else {
          advance();
        }
      }
      return false;
    }

   private:
    friend class interleave_dataset;

    // A dataset made by f and the cursor reading it; never moved once made.
    struct slot {
      inner_dataset dataset;
      cursor_t<inner_dataset> reader;
      slot(inner_dataset d, std::uint64_t epoch) : dataset(std::move(d)), reader(dataset.open(epoch)) {}
    };

    cursor(cursor_t<Source> source, F function, int cycle_length, int block_length, std::uint64_t epoch)
        : source_(std::move(source)),
          function_(std::move(function)),
          slots_(static_cast<std::size_t>(cycle_length)),
          block_length_(block_length),
          epoch_(epoch) {}

    void advance() {
      block_index_ = 0;
      cycle_index_ = (cycle_index_ + 1) % slots_.size();
    }

    cursor_t<Source> source_;
    F function_;
    source_element input_{};
    std::vector<std::optional<slot>> slots_;  // (cycle_length), sized once: slots never move
    int block_length_;
    std::uint64_t epoch_;
    std::size_t cycle_index_ = 0;
    int block_index_ = 0;
    std::size_t open_slots_ = 0;
    bool source_ended_ = false;
  };

  cursor open(std::uint64_t epoch = 0) const {
    return cursor(source_.open(epoch), function_, cycle_length_, block_length_, epoch);
  }

 private:
  Source source_;
  F function_;
  int cycle_length_;
  int block_length_;
};

template <class F>
struct interleave_adaptor {
  static constexpr bool is_pipeline_adaptor = true;
  F function;
  int cycle_length;
  int block_length;

  template <dataset Source>
  auto operator()(Source source) const {
    using element = typename Source::element_type;
    constexpr bool callable = std::is_invocable_v<const F&, const element&>;
    if constexpr (!callable) {
      static_assert(callable,
                    "interleave(f, ...): f cannot be called with this stage's element type; "
                    "f must accept the previous stage's element_type (e.g. a file path) by value or by const&");
      return source;
    } else if constexpr (!dataset<std::decay_t<std::invoke_result_t<const F&, const element&>>>) {
      static_assert(dependent_false<Source>,
                    "interleave(f, ...): f must return a dataset (e.g. text_file(path)) for each element");
      return source;
    } else {
      return interleave_dataset<Source, F>(std::move(source), function, cycle_length, block_length);
    }
  }
};

template <class F>
interleave_adaptor<std::decay_t<F>> interleave(F&& function, int cycle_length, int block_length = 1) {
  if (cycle_length < 1)
    throw std::invalid_argument("interleave(f, cycle_length, block_length): cycle_length must be at least 1; got " +
                                std::to_string(cycle_length));
  if (block_length < 1)
    throw std::invalid_argument("interleave(f, cycle_length, block_length): block_length must be at least 1; got " +
                                std::to_string(block_length));
  return {std::forward<F>(function), cycle_length, block_length};
}

}  // namespace typeflow::data

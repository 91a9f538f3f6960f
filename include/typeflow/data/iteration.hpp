// Datasets are ranges: `for (auto& batch : ds)` reads one pass, as
// `auto c = ds.open(); while (c.next(batch))` does, with the same elements in
// the same order (epoch 0); `for (auto& b : epoch(ds, k))` reads epoch k
// (shuffle's order for that epoch).
//
//   for (const auto& batch : mnist(dir, split::test) | batch<256>)
//     std::printf("%d samples\n", batch.valid);
//
// The iterator owns the pass's cursor and one element, filled in place
// (nothing allocates per element); it is an input iterator: one pass, read
// once. begin() and end() are free functions found by argument-dependent
// lookup, so every stage, and any_dataset, is a range without a member.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <type_traits>
#include <utility>

#include "typeflow/data/example.hpp"
#include "typeflow/data/pipe.hpp"

namespace typeflow::data {

template <dataset D>
class dataset_iterator {
 public:
  using value_type = typename D::element_type;
  using difference_type = std::ptrdiff_t;
  using iterator_concept = std::input_iterator_tag;

  dataset_iterator() = default;
  dataset_iterator(const D& d, std::uint64_t epoch) : cursor_(d.open(epoch)) { advance(); }
  dataset_iterator(dataset_iterator&&) = default;
  dataset_iterator& operator=(dataset_iterator&&) = default;

  value_type& operator*() const { return element_; }
  value_type* operator->() const { return &element_; }
  dataset_iterator& operator++() {
    advance();
    return *this;
  }
  void operator++(int) { advance(); }
  friend bool operator==(const dataset_iterator& i, std::default_sentinel_t) { return i.done_; }

 private:
  void advance() { done_ = !cursor_ || !cursor_->next(element_); }

  std::optional<cursor_t<D>> cursor_;
  mutable value_type element_{};  // the current element, refilled in place
  bool done_ = true;
};

// By D& (D may be const), so that std::ranges::begin prefers them to its own
// deleted fallbacks.
template <class D>
  requires dataset<std::remove_const_t<D>>
dataset_iterator<std::remove_const_t<D>> begin(D& d) {
  return {d, 0};
}
template <class D>
  requires dataset<std::remove_const_t<D>>
std::default_sentinel_t end(D&) {
  return std::default_sentinel;
}

// One epoch's pass over a dataset, as a range (shuffle reshuffles by epoch).
template <dataset D>
class epoch_view {
 public:
  epoch_view(D d, std::uint64_t epoch) : dataset_(std::move(d)), epoch_(epoch) {}
  dataset_iterator<D> begin() const { return {dataset_, epoch_}; }
  std::default_sentinel_t end() const { return std::default_sentinel; }

 private:
  D dataset_;
  std::uint64_t epoch_;
};

template <dataset D>
epoch_view<D> epoch(D d, std::uint64_t k) {
  return {std::move(d), k};
}

}  // namespace typeflow::data

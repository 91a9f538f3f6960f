// The model's arena: one 64-byte aligned block that the memory plan divides.
//
// It only grows, and growing keeps a prefix (the weights, gradients and
// optimizer state), so a model can be compiled and fitted with new batch
// sizes without losing its training state. Growth happens at set-up, never
// inside a step.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "typeflow/model/layer.hpp"

namespace typeflow {

class arena {
 public:
  std::byte* data() noexcept { return data_.get(); }
  const std::byte* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_; }

  template <class T = float>
  T* at(std::size_t byte_offset) noexcept {
    return reinterpret_cast<T*>(data_.get() + byte_offset);
  }
  template <class T = float>
  const T* at(std::size_t byte_offset) const noexcept {
    return reinterpret_cast<const T*>(data_.get() + byte_offset);
  }

  // Makes the arena at least `bytes` long, keeping its first `keep` bytes;
  // new bytes are zero.
  void reserve(std::size_t bytes, std::size_t keep) {
    if (bytes <= size_) return;
    const std::size_t rounded = align_up(bytes);
    void* raw = std::aligned_alloc(arena_alignment, rounded);
    if (!raw) throw std::bad_alloc();
    std::unique_ptr<std::byte[], deleter> grown(static_cast<std::byte*>(raw));
    const std::size_t kept = keep < size_ ? keep : size_;
    if (kept) std::memcpy(grown.get(), data_.get(), kept);
    std::memset(grown.get() + kept, 0, rounded - kept);
    data_ = std::move(grown);
    size_ = rounded;
  }

 private:
  struct deleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<std::byte[], deleter> data_;
  std::size_t size_ = 0;
};

}  // namespace typeflow

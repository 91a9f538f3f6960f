// The model's arena: one 64-byte aligned block that the memory plan divides.
//
// It only grows, and growing keeps a prefix (the weights, gradients and
// optimizer state), so a model can be compiled and fitted with new batch
// sizes without losing its training state. Growth happens at set-up, never
// inside a step.
//
// On Linux the block is an anonymous mapping, and growing it is mremap: the
// kernel moves the pages, nothing is copied, and the old and the new block
// never both exist. (With a heap block, growing allocates the new size,
// copies and frees: GPT-2 124M's arena (2.2 GiB) peaked at 4.3 GB of resident
// memory during the first step, when the step region is added.) New pages
// are the kernel's zero pages until written. Under AddressSanitizer the
// arena stays a heap block, so that ASan still checks its end.
//
// zero<3> (train/gather_window.hpp) maps some of its page ranges onto a
// shared window (alias): several ranges then show the same memory, which
// release() and resident_bytes() leave to the window, and which growing
// (reserve) drops first, as unalias() does.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)  // clang's spelling of __SANITIZE_ADDRESS__
#define TYPEFLOW_ARENA_ASAN 1
#endif
#endif
#if defined(__linux__) && !defined(__SANITIZE_ADDRESS__) && !defined(TYPEFLOW_ARENA_ASAN)
#include <sys/mman.h>
#define TYPEFLOW_ARENA_MREMAP 1
#else
#define TYPEFLOW_ARENA_MREMAP 0
#endif

#include "typeflow/contract/layer.hpp"

namespace typeflow {

class arena {
 public:
  arena() = default;
  arena(const arena&) = delete;
  arena& operator=(const arena&) = delete;
  arena(arena&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        aliases_(std::exchange(other.aliases_, {})) {}
  arena& operator=(arena&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      aliases_ = std::exchange(other.aliases_, {});
    }
    return *this;
  }
  ~arena() { release(); }

  std::byte* data() noexcept { return data_; }
  const std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

  template <class T = float>
  T* at(std::size_t byte_offset) noexcept {
    return reinterpret_cast<T*>(data_ + byte_offset);
  }
  template <class T = float>
  const T* at(std::size_t byte_offset) const noexcept {
    return reinterpret_cast<const T*>(data_ + byte_offset);
  }

  // Makes the arena at least `bytes` long, keeping its first `keep` bytes;
  // the others (old and new) are zero.
  void reserve(std::size_t bytes, std::size_t keep) {
    if (bytes <= size_) return;
    const std::size_t kept = keep < size_ ? keep : size_;
#if TYPEFLOW_ARENA_MREMAP
    unalias();  // one private mapping again, which mremap can move
    const std::size_t rounded = round_to_pages(bytes);
    void* grown = size_ == 0 ? ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                             : ::mremap(data_, size_, rounded, MREMAP_MAYMOVE);
    if (grown == MAP_FAILED && size_ != 0) grown = copy_to_new_mapping(rounded);
    if (grown == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<std::byte*>(grown);
    if (kept < size_) std::memset(data_ + kept, 0, size_ - kept);  // pages past the old end are zero already
#else
    const std::size_t rounded = align_up(bytes);
    void* raw = std::aligned_alloc(arena_alignment, rounded);
    if (!raw) throw std::bad_alloc();
    auto* grown = static_cast<std::byte*>(raw);
    if (kept) std::memcpy(grown, data_, kept);
    std::memset(grown + kept, 0, rounded - kept);
    std::free(data_);
    data_ = grown;
#endif
    size_ = rounded;
  }

  // zero<3> (train/cpu_replicas.hpp): gives back the pages that lie wholly
  // inside [offset, offset + bytes), whose values are not needed until they
  // are written again; they read as zero afterwards, and hold no memory until
  // then. (A heap block, under AddressSanitizer, is zeroed there instead.)
  // Pages aliased onto a window are the window's: they stay.
  void release(std::size_t offset, std::size_t bytes) noexcept {
    if (bytes == 0 || offset >= size_) return;
    if (bytes > size_ - offset) bytes = size_ - offset;
#if TYPEFLOW_ARENA_MREMAP
    constexpr std::size_t page = 4096;
    const std::size_t first = (offset + page - 1) / page * page, last = (offset + bytes) / page * page;
    std::size_t at = first;
    for (const auto& [a, b] : aliases_) {
      if (b <= at || a >= last) continue;
      if (a > at) ::madvise(data_ + at, a - at, MADV_DONTNEED);
      at = b;
    }
    if (at < last) ::madvise(data_ + at, last - at, MADV_DONTNEED);
#else
    std::memset(data_ + offset, 0, bytes);
#endif
  }

  // zero<3>'s window (train/gather_window.hpp): maps the whole pages of
  // [offset, offset + bytes) onto the shared file fd from fd_offset on;
  // whatever they held is gone. Returns false where that cannot be done (a
  // heap block, or mmap refused): the pages stay private.
  bool alias(std::size_t offset, std::size_t bytes, int fd, std::size_t fd_offset) noexcept {
#if TYPEFLOW_ARENA_MREMAP
    constexpr std::size_t page = 4096;
    const std::size_t first = (offset + page - 1) / page * page, last = (offset + bytes) / page * page;
    if (first >= last || last > size_) return false;
    if (::mmap(data_ + first, last - first, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
               static_cast<off_t>(fd_offset)) == MAP_FAILED) {
      // MAP_FIXED failed: the range may be gone; a private mapping again, empty.
      ::mmap(data_ + first, last - first, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      return false;
    }
    const auto at = std::lower_bound(aliases_.begin(), aliases_.end(), std::pair{first, last});
    aliases_.insert(at, {first, last});
    return true;
#else
    (void)offset, (void)bytes, (void)fd, (void)fd_offset;
    return false;
#endif
  }
  // Every aliased range private and empty again (reads as zero).
  void unalias() noexcept {
#if TYPEFLOW_ARENA_MREMAP
    for (const auto& [a, b] : aliases_)
      ::mmap(data_ + a, b - a, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
#endif
    aliases_.clear();
  }
  // Whether the page at `offset` is aliased onto a window.
  bool aliased(std::size_t offset) const noexcept {
    const auto at = std::upper_bound(aliases_.begin(), aliases_.end(), std::pair{offset, ~std::size_t{0}});
    return at != aliases_.begin() && offset < std::prev(at)->second;
  }

  // The bytes of [offset, offset + bytes) held in memory now, whole pages
  // counted (mincore); the range's size where that cannot be known.
  std::size_t resident_bytes(std::size_t offset, std::size_t bytes) const {
    if (offset >= size_) return 0;
    if (bytes > size_ - offset) bytes = size_ - offset;
#if TYPEFLOW_ARENA_MREMAP
    constexpr std::size_t page = 4096;
    const std::size_t first = offset / page * page, last = (offset + bytes + page - 1) / page * page;
    std::vector<unsigned char> in_core((last - first) / page);
    if (in_core.empty() || ::mincore(const_cast<std::byte*>(data_) + first, last - first, in_core.data()) != 0)
      return bytes;
    for (const auto& [a, b] : aliases_)  // the window's, counted there
      for (std::size_t at = std::max(a, first); at < std::min(b, last); at += page) in_core[(at - first) / page] = 0;
    std::size_t count = 0;
    for (unsigned char c : in_core) count += c & 1u;
    return count * page;
#else
    return bytes;
#endif
  }

 private:
#if TYPEFLOW_ARENA_MREMAP
  static std::size_t round_to_pages(std::size_t bytes) {
    constexpr std::size_t page = 4096;  // mmap's granularity; at least arena_alignment
    static_assert(page % arena_alignment == 0);
    return (bytes + page - 1) / page * page;
  }
  // Growing when mremap cannot move the block whole: zero<3>'s page bank
  // (train/page_bank.hpp) split it into several mappings. The pages that
  // hold memory are copied into a new mapping; the others stay empty there.
  void* copy_to_new_mapping(std::size_t bytes) noexcept {
    constexpr std::size_t page = 4096;
    void* fresh = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fresh == MAP_FAILED) return fresh;
    std::vector<unsigned char> in_core(size_ / page, 1);
    if (::mincore(data_, size_, in_core.data()) != 0) in_core.assign(in_core.size(), 1);
    for (std::size_t i = 0; i < in_core.size(); ++i)
      if (in_core[i] & 1u) std::memcpy(static_cast<std::byte*>(fresh) + i * page, data_ + i * page, page);
    ::munmap(data_, size_);
    return fresh;
  }
#endif
  void release() noexcept {
    if (!data_) return;
#if TYPEFLOW_ARENA_MREMAP
    ::munmap(data_, size_);
#else
    std::free(data_);
#endif
    data_ = nullptr;
    size_ = 0;
    aliases_.clear();
  }

  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::vector<std::pair<std::size_t, std::size_t>> aliases_;  // [first, last) page offsets, in order
};

}  // namespace typeflow

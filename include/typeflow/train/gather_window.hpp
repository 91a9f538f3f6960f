// zero<3>'s window: the pages where a replica gathers one unit's weights and
// writes its gradients, shared by every unit.
//
// A replica under zero<3> holds one unit's weights outside its shard at a
// time (and, in backward, that unit's gradients), each at the unit's own
// place in the arena, which the layers' addresses fix. Giving those pages
// back after the unit and faulting them in again, zeroed, at the next gather
// costs more than the step: measured on the 2-core test machine (a virtual
// machine, kernel 6.18, 2026-12-07), filling 4 MiB of freed pages took 17 ms
// against 0.18 ms for pages that stay mapped; 5,552 faults a step made
// zero<3, mirrored<2>>'s step 7x mirrored<2>'s. So the arena's ranges of
// every unit are mapped, once, onto the same pages of one shared memory
// file (memfd): what the next unit gathers overwrites what the last one
// left, which is what freeing it meant, and no page is faulted again.
//
//   note(part, offset, bytes)  during the steps, in unit order: a piece of
//                       the current unit (begin_unit()), of the arena's
//                       whole pages in [offset, offset + bytes). Its
//                       place in the file: its part's region, after the
//                       unit's earlier pieces of that part, so that the
//                       pieces live at one time never share a page.
//   map(memory)         between steps: aliases the noted pieces that are not
//                       yet (arena::alias; the first step, or after make_whole
//                       or a growing arena dropped them).
//   resident_bytes()    the file's pages that hold memory (fstat).
//
// The parts: a unit's weights, a tied matrix gathered with the unit that
// reads it (tied_logits' embedding: live with another unit's weights, so in
// its own region), and a unit's gradients. A tied matrix's gradients stay
// private: they add up over several units' backward. Each region starts at
// a multiple of 2^40 bytes in the file, which is sparse: only written pages
// hold memory. Where memfd_create or mmap is refused (or the arena is a heap
// block, under AddressSanitizer), nothing is aliased and the pages are freed
// and faulted in as before.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "typeflow/train/arena.hpp"

#if TYPEFLOW_ARENA_MREMAP
#include <sys/stat.h>
#include <unistd.h>
#endif

namespace typeflow {

class gather_window {
 public:
  enum part : int { weights = 0, tied_weights = 1, gradients = 2 };
  static constexpr std::size_t page = 4096;

  gather_window() = default;
  gather_window(const gather_window&) = delete;
  gather_window& operator=(const gather_window&) = delete;
  ~gather_window() {
#if TYPEFLOW_ARENA_MREMAP
    if (fd_ >= 0) ::close(fd_);
#endif
  }

  void begin_unit() { cursor_.fill(0); }

  void note(part p, std::size_t offset, std::size_t bytes) {
    const std::size_t first = (offset + page - 1) / page * page, last = (offset + bytes) / page * page;
    if (first >= last) return;
    std::size_t& cursor = cursor_[static_cast<std::size_t>(p)];
    const std::size_t at = region(p) + cursor;
    cursor += last - first;
    const auto it = std::lower_bound(pieces_.begin(), pieces_.end(), first,
                                     [](const piece& x, std::size_t f) { return x.first < f; });
    if (it != pieces_.end() && it->first == first) {
      // Seen before: each step gathers the same units in the same order, so
      // it has the same place. Another place could share pages with a piece
      // live beside it: refused rather than computed on.
      if (it->last != last || it->at != at)
        throw std::logic_error("gather_window: a zero<3> unit's pages [" + std::to_string(first) + ", " +
                               std::to_string(last) + ") were gathered in another order than before");
      return;
    }
    pieces_.insert(it, {first, last, at});
  }

  void map(arena& memory) {
#if TYPEFLOW_ARENA_MREMAP
    if (!usable_ || pieces_.empty()) return;
    if (fd_ < 0) {
      fd_ = static_cast<int>(::memfd_create("typeflow-zero3-window", MFD_CLOEXEC));
      if (fd_ < 0 || ::ftruncate(fd_, static_cast<off_t>(3 * region_bytes)) != 0) {
        usable_ = false;
        return;
      }
    }
    for (const piece& x : pieces_)
      if (!memory.aliased(x.first) && !memory.alias(x.first, x.last - x.first, fd_, x.at)) {
        usable_ = false;  // the kernel refused: the rest stays private
        return;
      }
#else
    (void)memory;
#endif
  }

  std::size_t resident_bytes() const {
#if TYPEFLOW_ARENA_MREMAP
    struct stat s {};
    if (fd_ >= 0 && ::fstat(fd_, &s) == 0) return static_cast<std::size_t>(s.st_blocks) * 512;
#endif
    return 0;
  }

 private:
  static constexpr std::size_t region_bytes = std::size_t{1} << 40;
  static constexpr std::size_t region(part p) { return static_cast<std::size_t>(p) * region_bytes; }

  struct piece {
    std::size_t first, last;  // the arena's pages, byte offsets
    std::size_t at;           // in the file
  };
  std::vector<piece> pieces_;  // by first
  std::array<std::size_t, 3> cursor_{};
  int fd_ = -1;
  bool usable_ = true;
};

}  // namespace typeflow

// The bf16 copies of weights that native bf16 products read, kept from one
// step to the next.
//
// On the native bf16 path (backend/cpu/products_16bit.hpp) dense's kernel,
// attention's two projection kernels and tied_logits' matrix are read in
// bf16. Each such layer keeps its copy in its workspace and registers it
// here at set-up; its forward converts the float32 tensor again only when
// the weights changed since the copy was made (stale()).
//
// The engine that owns the context numbers the weights' versions: whatever
// writes the weights (load_weights, parameter(), swap_ema_weights, an
// optimizer) starts a new one. Its optimizer's pass also writes the copies
// of the tensors it updates (optimizers/update.hpp), while the new values
// are still in registers, so those copies stay current and the next forward
// converts nothing: each step reads the float32 weights once, not twice.
//
// A context that nobody versions (kept false: a mirrored replica's, a test
// rig's) converts in every forward, as does a layer whose workspace does
// not outlive the step (inside recompute<...>).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "typeflow/core/half.hpp"

namespace typeflow::precision {

struct weight_copy {
  const float* source = nullptr;  // the float32 tensor
  bf16* copy = nullptr;           // `count` bf16 values
  std::size_t count = 0;
  std::uint64_t version = 0;      // the weights' version the copy holds (0: none yet)
  bool persistent = false;        // the copy's bytes outlive the step
  bool optimizer_writes = false;  // the engine's optimizer writes it (set by the engine)
};

class weight_copies {
 public:
  // Whether an engine versions the weights; without one every forward converts.
  bool kept = false;

  // A layer's copy, at set-up; returns its index.
  std::size_t add(const float* source, bf16* copy, std::size_t count, bool persistent) {
    entries_.push_back({source, copy, count, 0, persistent, false});
    return entries_.size() - 1;
  }
  // Whether copy i must be made again before a product reads it; made(i)
  // records that it was.
  bool stale(std::size_t i) const {
    const weight_copy& c = entries_[i];
    return !kept || !c.persistent || c.version != version_;
  }
  void made(std::size_t i) { entries_[i].version = version_; }

  // The weights were written outside an optimizer update: every copy is stale.
  void weights_changed() { ++version_; }
  // After an optimizer update: a new version, which the copies the optimizer
  // wrote hold (when it wrote them), and so do the current copies of tensors
  // in [unchanged_begin, unchanged_end), which no optimizer changes (frozen ones).
  void after_update(bool optimizer_wrote, const float* unchanged_begin, const float* unchanged_end) {
    const std::uint64_t before = version_++;
    for (weight_copy& c : entries_) {
      const bool unchanged = c.source >= unchanged_begin && c.source < unchanged_end && c.version == before;
      if ((optimizer_wrote && c.optimizer_writes) || unchanged) c.version = version_;
    }
  }
  // A new program registers its own copies.
  void clear() {
    entries_.clear();
    ++generation_;
  }

  std::span<weight_copy> entries() { return entries_; }
  std::span<const weight_copy> entries() const { return entries_; }
  std::uint64_t version() const { return version_; }
  // Changes whenever the entries are cleared.
  std::uint64_t generation() const { return generation_; }

 private:
  std::vector<weight_copy> entries_;
  std::uint64_t version_ = 1;
  std::uint64_t generation_ = 0;
};

}  // namespace typeflow::precision

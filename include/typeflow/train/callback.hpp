// Callbacks: what fit tells the outside world, and the logs it passes along.
//
// Logs are a fixed-size table of (name, value) so that reporting a step's
// loss allocates nothing; names are string_views into storage that lives as
// long as the fit call.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace typeflow {

struct log_entry {
  std::string_view name;
  double value = 0;
};

struct logs {
  static constexpr std::size_t capacity = 32;
  std::array<log_entry, capacity> entries{};
  std::size_t count = 0;

  // Sets name to value, adding it if absent. Beyond capacity, extra names are
  // dropped rather than allocated.
  void set(std::string_view name, double value) noexcept {
    for (std::size_t i = 0; i < count; ++i)
      if (entries[i].name == name) {
        entries[i].value = value;
        return;
      }
    if (count < capacity) entries[count++] = {name, value};
  }
  std::optional<double> get(std::string_view name) const noexcept {
    for (std::size_t i = 0; i < count; ++i)
      if (entries[i].name == name) return entries[i].value;
    return std::nullopt;
  }
  const log_entry* begin() const noexcept { return entries.data(); }
  const log_entry* end() const noexcept { return entries.data() + count; }
  void clear() noexcept { count = 0; }
};

struct epoch_info {
  int epoch = 0;          // 0-based
  int epochs = 1;         // total epochs of this fit
  std::int64_t steps = -1;  // steps in this epoch, -1 when the dataset's size is unknown
};

class callback {
 public:
  virtual ~callback() = default;
  virtual void on_train_begin() {}
  virtual void on_epoch_begin(const epoch_info&) {}
  // step is 1-based within the epoch; logs hold running means over the epoch.
  virtual void on_batch_end(std::int64_t /*step*/, const logs&) {}
  // logs hold the epoch's means, and val_* entries when fit validated.
  virtual void on_epoch_end(const epoch_info&, const logs&) {}
  virtual void on_train_end(const logs&) {}
};

}  // namespace typeflow

// progress_bar: Keras-style progress reporting for fit.
//
// Two displays, chosen by where the output goes:
//
//   bar (a terminal): "Epoch 1/3" when an epoch begins, then one line redrawn
//   in place with '\r' after batches, and the epoch's final line at its end:
//
//     Epoch 1/3
//     123/469 [======>.......................] - ETA: 4s - loss: 0.2345 - accuracy: 0.9312
//     469/469 [==============================] - 5s 11ms/step - run ETA: 10s - loss: 0.1234 - val_loss: 0.0991
//
//   The epoch's final line says when the run should end ("run ETA", the
//   epochs' mean time times the epochs left) while epochs remain. "mfu"
//   (model FLOPs utilisation, train/fit_loop.hpp) prints as a percentage.
//
//   While the epoch's size is unknown (epoch_info::steps == -1) the running
//   line reads "123/Unknown - 4s 11ms/step - loss: ..."; the final line then
//   counts the steps seen as the epoch's size, "123/123 [===...] - ...".
//
//   lines (a file, a pipe, a CI log): nothing per batch, one flushed line per
//   epoch at its end:
//
//     Epoch 1/3 - 469/469 - 5s 11ms/step - run ETA: 10s - loss: 0.1234 - mfu: 41.5% - val_loss: 0.0991
//
// Redraws are throttled: a batch end draws when it is the epoch's first
// drawing, when it is the epoch's last known step, or when at least
// redraw_interval has passed since the previous drawing; other batch ends only
// remember their step. The epoch's end always draws, so the last step shows.
// A redraw that is shorter than the one before pads with spaces to erase it,
// and a running line is cut to the terminal's width so '\r' can return over it.
//
// Values print as Keras prints them: "%.4f", or "%.4e" when smaller than 1e-3
// (throughputs, "..._per_second", as whole numbers)
// in magnitude; "lr" and "learning_rate" print as "%.3g" when that small.
//
// on_batch_end allocates nothing, by construction: it formats with snprintf
// into line_ (a fixed buffer member; a line longer than it is cut short),
// writes with fwrite and fflush, and reads the clock through now(). Only the
// FILE's own buffer, which the C library sets up on the stream's first write
// (the "Epoch" header, in practice), may come from the heap.
//
// Tests inject a clock by overriding now().
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string_view>

#include "typeflow/callbacks/callback.hpp"

#if defined(_WIN32)
#include <io.h>
#else
#include <sys/ioctl.h>
#include <unistd.h>
#endif

namespace typeflow {

class progress_bar : public callback {
 public:
  enum class display {
    automatic,  // bar when the stream is a terminal, lines otherwise
    bar,        // redraw one line in place per batch
    lines,      // one line per epoch
  };
  using clock = std::chrono::steady_clock;

  static constexpr int bar_width = 30;                                   // characters between [ ]
  static constexpr clock::duration redraw_interval = std::chrono::milliseconds(50);
  static constexpr std::size_t line_capacity = 4096;                    // bytes, with '\r' and padding

  // out must stay open for the life of the progress_bar.
  explicit progress_bar(std::FILE* out = stdout, display mode = display::automatic) noexcept
      : out_(out), display_(mode == display::automatic ? (is_terminal(out) ? display::bar : display::lines) : mode) {}

  // The resolved display: bar or lines, never automatic.
  display display_mode() const noexcept { return display_; }

  void on_train_begin() override {
    run_seconds_ = 0;
    epochs_timed_ = 0;
  }

  void on_epoch_begin(const epoch_info& info) override {
    epoch_ = info;
    epoch_start_ = now();
    last_step_ = 0;
    drawn_this_epoch_ = false;
    if (display_ != display::bar) return;
    if (previous_width_ > 0) std::fputc('\n', out_);  // the last epoch never ended: keep its line
    previous_width_ = 0;
    columns_ = terminal_columns(out_);
    std::fprintf(out_, "Epoch %d/%d\n", info.epoch + 1, info.epochs);
    std::fflush(out_);
  }

  void on_batch_end(std::int64_t step, const logs& batch_logs) override {
    last_step_ = step;
    if (display_ != display::bar) return;
    const clock::time_point time = now();
    const bool last_known_step = epoch_.steps >= 0 && step >= epoch_.steps;
    if (drawn_this_epoch_ && !last_known_step && time - last_draw_ < redraw_interval) return;
    drawn_this_epoch_ = true;
    last_draw_ = time;
    draw_running_line(step, seconds(time - epoch_start_), batch_logs);
  }

  void on_epoch_end(const epoch_info& info, const logs& epoch_logs) override {
    const double elapsed = seconds(now() - epoch_start_);
    const std::int64_t steps = info.steps >= 0 ? info.steps : last_step_;
    line_.clear();
    if (display_ == display::bar) {
      line_.append("\r");
      append_counter(last_step_, steps);
      append_bar(last_step_, steps);
    } else {
      line_.append("Epoch %d/%d - ", info.epoch + 1, info.epochs);
      append_counter(last_step_, steps);
    }
    append_elapsed(elapsed, last_step_);
    run_seconds_ += elapsed;
    ++epochs_timed_;
    if (const int remaining = info.epochs - info.epoch - 1; remaining > 0) {  // the run's, at the epochs' mean time
      line_.append(" - run ETA: ");
      append_duration(run_seconds_ / epochs_timed_ * remaining);
    }
    append_values(epoch_logs);
    if (display_ == display::bar) pad_over_previous_line(visible_width());
    line_.append("\n");
    previous_width_ = 0;
    write_line();
  }

 protected:
  // The clock every duration is measured with; tests override it.
  virtual clock::time_point now() const { return clock::now(); }

 private:
  // A fixed buffer that snprintf appends into; what does not fit is dropped.
  struct line_buffer {
    std::array<char, line_capacity> text{};
    std::size_t length = 0;

    void clear() noexcept { length = 0; }
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    void append(const char* format, ...) noexcept {
      std::va_list arguments;
      va_start(arguments, format);
      const int written = std::vsnprintf(text.data() + length, text.size() - length, format, arguments);
      va_end(arguments);
      if (written > 0) length = std::min(length + static_cast<std::size_t>(written), text.size() - 1);
    }
  };

  static bool is_terminal(std::FILE* out) noexcept {
#if defined(_WIN32)
    return _isatty(_fileno(out)) != 0;
#else
    return ::isatty(::fileno(out)) != 0;
#endif
  }

  // The terminal's width in columns, or 0 when it cannot be told.
  static std::size_t terminal_columns([[maybe_unused]] std::FILE* out) noexcept {
#if defined(TIOCGWINSZ)
    winsize size{};
    if (::ioctl(::fileno(out), TIOCGWINSZ, &size) == 0) return size.ws_col;
#endif
    return 0;
  }

  static double seconds(clock::duration duration) noexcept {
    return std::chrono::duration<double>(duration).count();
  }

  static int digits(std::int64_t value) noexcept {
    int count = 1;
    while (value >= 10) value /= 10, ++count;
    return count;
  }

  void draw_running_line(std::int64_t step, double elapsed, const logs& batch_logs) noexcept {
    line_.clear();
    line_.append("\r");
    append_counter(step, epoch_.steps);
    if (epoch_.steps >= 0) {
      append_bar(step, epoch_.steps);
      const double seconds_per_step = step > 0 ? elapsed / static_cast<double>(step) : 0.0;
      const auto remaining = static_cast<double>(std::max<std::int64_t>(epoch_.steps - step, 0));
      line_.append(" - ETA: ");
      append_duration(seconds_per_step * remaining);
    } else {
      append_elapsed(elapsed, step);
    }
    append_values(batch_logs);
    std::size_t width = visible_width();
    if (columns_ > 1 && width > columns_ - 1) {  // a wrapped line cannot be redrawn with '\r'
      width = columns_ - 1;
      line_.length = width + 1;
    }
    pad_over_previous_line(width);
    previous_width_ = width;
    write_line();
  }

  // "15/30", right-aligned to the width of the step count; "15/Unknown".
  void append_counter(std::int64_t step, std::int64_t steps) noexcept {
    if (steps < 0)
      line_.append("%lld/Unknown", static_cast<long long>(step));
    else
      line_.append("%*lld/%lld", digits(steps), static_cast<long long>(step), static_cast<long long>(steps));
  }

  // " [==============>...............]": filled in proportion, '>' at the head
  // until the last step.
  void append_bar(std::int64_t step, std::int64_t steps) noexcept {
    const std::int64_t done = std::clamp<std::int64_t>(step, 0, steps);
    const int filled = steps > 0 ? static_cast<int>(bar_width * done / steps) : bar_width;
    char bar[bar_width + 1];
    for (int i = 0; i < bar_width; ++i) bar[i] = i < filled ? '=' : '.';
    if (filled > 0 && done < steps) bar[filled - 1] = '>';
    bar[bar_width] = '\0';
    line_.append(" [%s]", bar);
  }

  // " - 5s 11ms/step"; the per-step time is left out before any step.
  void append_elapsed(double elapsed, std::int64_t steps) noexcept {
    line_.append(" - ");
    append_duration(elapsed);
    if (steps <= 0) return;
    const double per_step = elapsed / static_cast<double>(steps);
    if (per_step >= 1.0)
      line_.append(" %.0fs/step", per_step);
    else if (per_step >= 1e-3)
      line_.append(" %.0fms/step", per_step * 1e3);
    else
      line_.append(" %.0fus/step", per_step * 1e6);
  }

  // "5s", "1m 05s", "2h 03m 04s", rounded to the second.
  void append_duration(double duration) noexcept {
    const long long total = std::llround(std::max(duration, 0.0));
    if (total < 60)
      line_.append("%llds", total);
    else if (total < 3600)
      line_.append("%lldm %02llds", total / 60, total % 60);
    else
      line_.append("%lldh %02lldm %02llds", total / 3600, total / 60 % 60, total % 60);
  }

  // " - loss: 0.1234 - lr: 1e-05 ..." for every entry, in the logs' order.
  void append_values(const logs& entries) noexcept {
    for (const log_entry& entry : entries) {
      const int name_length = static_cast<int>(entry.name.size());
      const bool small = entry.value != 0.0 && std::fabs(entry.value) < 1e-3;
      const bool learning_rate = entry.name == "lr" || entry.name == "learning_rate";
      // Throughput and skipped steps are whole numbers; the loss scale a power of two.
      const bool rate = entry.name.ends_with("_per_second") || entry.name == "skipped_steps";
      if (entry.name == "mfu") {  // a fraction of the machine's peak, as a percentage
        line_.append(" - mfu: %.1f%%", entry.value * 100);
        continue;
      }
      const char* format = rate                         ? " - %.*s: %.0f"
                           : entry.name == "loss_scale" ? " - %.*s: %g"
                           : !small                     ? " - %.*s: %.4f"
                           : learning_rate              ? " - %.*s: %.3g"
                                                        : " - %.*s: %.4e";
      line_.append(format, name_length, entry.name.data(), entry.value);
    }
  }

  // The characters the terminal shows: the line without its leading '\r'.
  std::size_t visible_width() const noexcept { return line_.length > 0 ? line_.length - 1 : 0; }

  void pad_over_previous_line(std::size_t width) noexcept {
    for (std::size_t column = width; column < previous_width_ && line_.length + 1 < line_.text.size(); ++column)
      line_.text[line_.length++] = ' ';
  }

  void write_line() noexcept {
    std::fwrite(line_.text.data(), 1, line_.length, out_);
    std::fflush(out_);
  }

  std::FILE* out_;
  display display_;
  epoch_info epoch_{};
  clock::time_point epoch_start_{};
  clock::time_point last_draw_{};
  bool drawn_this_epoch_ = false;
  std::int64_t last_step_ = 0;       // the latest step of the epoch, drawn or not
  double run_seconds_ = 0;           // the epochs of this fit so far, for the run's ETA
  int epochs_timed_ = 0;
  std::size_t previous_width_ = 0;   // visible width of the running line on screen, 0 after a newline
  std::size_t columns_ = 0;          // terminal width, 0 when unknown
  line_buffer line_;
};

}  // namespace typeflow

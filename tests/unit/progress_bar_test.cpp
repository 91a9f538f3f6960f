// progress_bar and history: what fit shows while it trains, and what it keeps.
//
// Output goes to an open_memstream FILE*, and time comes from a fake clock the
// test advances, so every line is compared character for character.
//
// on_batch_end's freedom from heap allocation is by design (fixed line buffer,
// snprintf, fwrite, a virtual clock) and documented in progress_bar.hpp; this
// binary does not replace operator new or malloc to measure it.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "typeflow/callbacks/history.hpp"
#include "typeflow/callbacks/progress_bar.hpp"

#if defined(__linux__)
#include <fcntl.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>
#endif

namespace {

using namespace std::chrono_literals;
using typeflow::epoch_info;
using typeflow::history;
using typeflow::history_recorder;
using typeflow::logs;
using typeflow::progress_bar;

// A FILE* whose contents the test can read back.
class captured_output {
 public:
  captured_output() : file_(open_memstream(&data_, &size_)) { REQUIRE(file_ != nullptr); }
  ~captured_output() {
    std::fclose(file_);
    std::free(data_);
  }
  captured_output(const captured_output&) = delete;
  captured_output& operator=(const captured_output&) = delete;

  std::FILE* file() const { return file_; }
  std::string text() {
    std::fflush(file_);
    return std::string(data_, size_);
  }

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::FILE* file_;
};

// A progress_bar whose clock stands still until the test advances it.
class clocked_progress_bar : public progress_bar {
 public:
  using progress_bar::progress_bar;
  void advance(clock::duration by) { time_ += by; }

 protected:
  clock::time_point now() const override { return time_; }

 private:
  clock::time_point time_{};
};

logs make_logs(std::initializer_list<std::pair<std::string_view, double>> entries) {
  logs result;
  for (const auto& [name, value] : entries) result.set(name, value);
  return result;
}

// Runs steps batch ends, each step_time after the one before.
void run_batches(clocked_progress_bar& bar, std::int64_t steps, progress_bar::clock::duration step_time,
                 const logs& batch_logs) {
  for (std::int64_t step = 1; step <= steps; ++step) {
    bar.advance(step_time);
    bar.on_batch_end(step, batch_logs);
  }
}

std::size_t count(std::string_view text, char wanted) {
  std::size_t found = 0;
  for (char c : text) found += c == wanted;
  return found;
}

// The text after the last '\r': what the terminal shows on the current line.
std::string current_line(const std::string& text) { return text.substr(text.rfind('\r') + 1); }

const logs epoch_logs = make_logs(
    {{"loss", 0.1234}, {"accuracy", 0.9612}, {"val_loss", 0.0991}, {"val_accuracy", 0.9701}});
const logs batch_logs = make_logs({{"loss", 0.1234}, {"accuracy", 0.9612}});

}  // namespace

TEST_CASE("automatic display writes lines when the stream is not a terminal") {
  captured_output out;
  progress_bar bar(out.file());
  CHECK(bar.display_mode() == progress_bar::display::lines);
  CHECK(progress_bar(out.file(), progress_bar::display::bar).display_mode() == progress_bar::display::bar);
}

TEST_CASE("lines display prints nothing per batch and exactly one line per epoch") {
  captured_output out;
  clocked_progress_bar bar(out.file(), progress_bar::display::lines);
  bar.on_train_begin();

  epoch_info info{.epoch = 0, .epochs = 3, .steps = 469};
  bar.on_epoch_begin(info);
  run_batches(bar, 469, 11ms, batch_logs);
  CHECK(out.text().empty());
  bar.on_epoch_end(info, epoch_logs);
  CHECK(out.text() ==
        "Epoch 1/3 - 469/469 - 5s 11ms/step - run ETA: 10s - loss: 0.1234 - accuracy: 0.9612 - val_loss: 0.0991 - "
        "val_accuracy: 0.9701\n");

  info.epoch = 1;
  bar.on_epoch_begin(info);
  run_batches(bar, 469, 11ms, batch_logs);
  bar.on_epoch_end(info, epoch_logs);
  const std::string text = out.text();
  CHECK(count(text, '\n') == 2);
  CHECK(count(text, '\r') == 0);
  CHECK(text.find("\nEpoch 2/3 - 469/469 - 5s 11ms/step - run ETA: 5s - loss: 0.1234") != std::string::npos);
}

TEST_CASE("the epoch's line gives the run's ETA from the epochs' mean time, and mfu as a percentage") {
  captured_output out;
  clocked_progress_bar bar(out.file(), progress_bar::display::lines);
  bar.on_train_begin();
  const logs mfu = make_logs({{"loss", 1.0}, {"mfu", 0.41234}});
  for (int epoch = 0; epoch < 4; ++epoch) {  // 10 s, then 30 s, 20 s and 20 s
    const epoch_info info{.epoch = epoch, .epochs = 4, .steps = 10};
    bar.on_epoch_begin(info);
    run_batches(bar, 10, epoch == 1 ? 3s : 1s * (epoch == 0 ? 1 : 2), mfu);
    bar.on_epoch_end(info, mfu);
  }
  const std::string text = out.text();
  INFO(text);
  CHECK(text.find("Epoch 1/4 - 10/10 - 10s 1s/step - run ETA: 30s - loss: 1.0000 - mfu: 41.2%\n") != std::string::npos);
  CHECK(text.find("Epoch 2/4 - 10/10 - 30s 3s/step - run ETA: 40s - ") != std::string::npos);  // 20 s a epoch, 2 left
  CHECK(text.find("Epoch 3/4 - 10/10 - 20s 2s/step - run ETA: 20s - ") != std::string::npos);
  CHECK(text.find("Epoch 4/4 - 10/10 - 20s 2s/step - loss") != std::string::npos);  // none left
}

TEST_CASE("lines display counts the steps seen when the epoch's size is unknown") {
  captured_output out;
  clocked_progress_bar bar(out.file(), progress_bar::display::lines);
  const epoch_info info{.epoch = 0, .epochs = 1, .steps = -1};
  bar.on_epoch_begin(info);
  run_batches(bar, 123, 33ms, batch_logs);
  bar.on_epoch_end(info, make_logs({{"loss", 0.5}}));
  CHECK(out.text() == "Epoch 1/1 - 123/123 - 4s 33ms/step - loss: 0.5000\n");
}

TEST_CASE("durations print as seconds, then minutes and seconds, step times in s, ms or us") {
  captured_output out;
  clocked_progress_bar bar(out.file(), progress_bar::display::lines);
  const logs loss = make_logs({{"loss", 1.0}});

  SUBCASE("83 seconds at 250us per step") {
    const epoch_info info{.epoch = 0, .epochs = 1, .steps = 332000};
    bar.on_epoch_begin(info);
    run_batches(bar, 332000, 250us, loss);
    bar.on_epoch_end(info, loss);
    CHECK(out.text() == "Epoch 1/1 - 332000/332000 - 1m 23s 250us/step - loss: 1.0000\n");
  }
  SUBCASE("2 hours at 2 seconds per step") {
    const epoch_info info{.epoch = 0, .epochs = 1, .steps = 3662};
    bar.on_epoch_begin(info);
    run_batches(bar, 3662, 2s, loss);
    bar.on_epoch_end(info, loss);
    CHECK(out.text() == "Epoch 1/1 - 3662/3662 - 2h 02m 04s 2s/step - loss: 1.0000\n");
  }
}

TEST_CASE("values print with 4 decimals, small ones in scientific form, learning rates as %.3g") {
  captured_output out;
  clocked_progress_bar bar(out.file(), progress_bar::display::lines);
  const epoch_info info{.epoch = 0, .epochs = 1, .steps = 1};
  bar.on_epoch_begin(info);
  bar.advance(1s);
  bar.on_batch_end(1, {});
  bar.on_epoch_end(info, make_logs({{"loss", 0.00005},
                                    {"accuracy", 0.0},
                                    {"count", 128.0},
                                    {"lr", 0.00001},
                                    {"learning_rate", 0.01}}));
  CHECK(out.text() ==
        "Epoch 1/1 - 1/1 - 1s 1s/step - loss: 5.0000e-05 - accuracy: 0.0000 - count: 128.0000 - lr: 1e-05 - "
        "learning_rate: 0.0100\n");
}

TEST_CASE("bar display announces the epoch, then draws the bar in place with an ETA") {
  captured_output out;
  clocked_progress_bar bar(out.file(), progress_bar::display::bar);
  const epoch_info info{.epoch = 0, .epochs = 2, .steps = 30};
  bar.on_epoch_begin(info);
  CHECK(out.text() == "Epoch 1/2\n");

  // Halfway at 200ms per step: 15 cells filled, the 15th the '>' head, and
  // 15 steps left at the mean step time.
  run_batches(bar, 15, 200ms, make_logs({{"loss", 0.5}, {"accuracy", 0.75}}));
  const std::string text = out.text();
  CHECK(count(text, '\n') == 1);
  CHECK(current_line(text) == "15/30 [==============>...............] - ETA: 3s - loss: 0.5000 - accuracy: 0.7500");
}

TEST_CASE("bar display pads the step to the width of the epoch's size and fills the bar like Keras") {
  captured_output out;
  clocked_progress_bar bar(out.file(), progress_bar::display::bar);
  const epoch_info info{.epoch = 0, .epochs = 1, .steps = 469};
  bar.on_epoch_begin(info);
  bar.advance(1s);
  bar.on_batch_end(7, {});  // 7 * 30 / 469 rounds down to 0 cells: no head yet
  CHECK(current_line(out.text()) == "  7/469 [..............................] - ETA: 1m 06s");
  bar.advance(1s);
  bar.on_batch_end(123, {});  // 123 * 30 / 469 = 7.9: 7 cells, the head last
  // Four spaces erase the end of "1m 06s".
  CHECK(current_line(out.text()) == "123/469 [======>.......................] - ETA: 6s    ");
}

TEST_CASE("bar display ends the epoch with elapsed time, time per step and validation values") {
  captured_output out;
  clocked_progress_bar bar(out.file(), progress_bar::display::bar);
  const epoch_info info{.epoch = 0, .epochs = 3, .steps = 469};
  bar.on_epoch_begin(info);
  run_batches(bar, 469, 11ms, batch_logs);
  bar.on_epoch_end(info, epoch_logs);
  const std::string text = out.text();
  CHECK(text.starts_with("Epoch 1/3\n\r  1/469 [...."));
  CHECK(text.ends_with(
      "\r469/469 [==============================] - 5s 11ms/step - run ETA: 10s - loss: 0.1234 - "
      "accuracy: 0.9612 - val_loss: 0.0991 - val_accuracy: 0.9701\n"));
  CHECK(count(text, '\n') == 2);
}

TEST_CASE("bar display shows elapsed time instead of a bar while the epoch's size is unknown") {
  captured_output out;
  clocked_progress_bar bar(out.file(), progress_bar::display::bar);
  const epoch_info info{.epoch = 0, .epochs = 1, .steps = -1};
  bar.on_epoch_begin(info);
  run_batches(bar, 123, 33ms, batch_logs);
  CHECK(current_line(out.text()) == "123/Unknown - 4s 33ms/step - loss: 0.1234 - accuracy: 0.9612");
  bar.on_epoch_end(info, make_logs({{"loss", 0.1234}}));
  // The final line counts the steps seen as the epoch's size.
  CHECK(current_line(out.text()) == "123/123 [==============================] - 4s 33ms/step - loss: 0.1234\n");
}

TEST_CASE("bar display redraws at most once per 50ms, but always the first and the last step") {
  captured_output out;
  clocked_progress_bar bar(out.file(), progress_bar::display::bar);
  const epoch_info info{.epoch = 0, .epochs = 1, .steps = 10};
  bar.on_epoch_begin(info);

  SUBCASE("a burst draws its first step and the epoch's last") {
    run_batches(bar, 10, 1ms, {});
    const std::string text = out.text();
    CHECK(count(text, '\r') == 2);
    CHECK(text.find("\r 1/10 [") != std::string::npos);
    CHECK(text.find("\r10/10 [") != std::string::npos);
  }
  SUBCASE("a step 50ms after the last drawing draws, one sooner does not") {
    run_batches(bar, 1, 1ms, {});  // step 1 at 1ms: drawn
    bar.advance(49ms);
    bar.on_batch_end(2, {});  // 49ms later: skipped
    bar.advance(1ms);
    bar.on_batch_end(3, {});  // 50ms later: drawn
    bar.advance(10ms);
    bar.on_batch_end(4, {});  // 10ms later: skipped
    const std::string text = out.text();
    CHECK(count(text, '\r') == 2);
    CHECK(text.find("\r 2/10") == std::string::npos);
    CHECK(current_line(text).starts_with(" 3/10 ["));
  }
  SUBCASE("the epoch's end draws the last step even when its batch end was skipped") {
    const epoch_info open_ended{.epoch = 0, .epochs = 1, .steps = -1};
    bar.on_epoch_begin(open_ended);
    run_batches(bar, 7, 1ms, {});
    bar.on_epoch_end(open_ended, {});
    CHECK(count(out.text(), '\r') == 2);
    CHECK(current_line(out.text()).starts_with("7/7 [==="));
  }
}

TEST_CASE("bar display erases the rest of a longer previous line") {
  captured_output out;
  clocked_progress_bar bar(out.file(), progress_bar::display::bar);
  const epoch_info info{.epoch = 0, .epochs = 1, .steps = 10};
  bar.on_epoch_begin(info);
  bar.advance(100ms);
  bar.on_batch_end(1, make_logs({{"loss", 12345.0}}));
  bar.advance(100ms);
  bar.on_batch_end(2, make_logs({{"loss", 1.0}}));
  CHECK(current_line(out.text()) == " 2/10 [=====>........................] - ETA: 1s - loss: 1.0000    ");
}

#if defined(__linux__)
TEST_CASE("automatic display draws a bar on a terminal, cut to the terminal's width") {
  const int controller = posix_openpt(O_RDWR | O_NOCTTY);
  REQUIRE(controller >= 0);
  REQUIRE(grantpt(controller) == 0);
  REQUIRE(unlockpt(controller) == 0);
  const int terminal = open(ptsname(controller), O_RDWR | O_NOCTTY);
  REQUIRE(terminal >= 0);
  termios settings{};
  REQUIRE(tcgetattr(terminal, &settings) == 0);
  settings.c_oflag &= ~static_cast<tcflag_t>(OPOST);  // keep '\n' as written
  REQUIRE(tcsetattr(terminal, TCSANOW, &settings) == 0);
  winsize size{};
  size.ws_col = 40;
  size.ws_row = 24;
  REQUIRE(ioctl(terminal, TIOCSWINSZ, &size) == 0);
  std::FILE* out = fdopen(terminal, "w");
  REQUIRE(out != nullptr);

  {
    clocked_progress_bar bar(out);
    CHECK(bar.display_mode() == progress_bar::display::bar);
    const epoch_info info{.epoch = 0, .epochs = 1, .steps = 30};
    bar.on_epoch_begin(info);
    run_batches(bar, 15, 200ms, batch_logs);
  }
  std::fclose(out);

  std::string text;
  char chunk[512];
  fcntl(controller, F_SETFL, O_NONBLOCK);
  for (ssize_t got; (got = read(controller, chunk, sizeof chunk)) > 0;) text.append(chunk, static_cast<std::size_t>(got));
  close(controller);
  CHECK(text.starts_with("Epoch 1/1\n"));
  CHECK(current_line(text) == "15/30 [==============>...............] ");  // 39 of 40 columns
}
#endif

TEST_CASE("history records each epoch's logs by name, through its recorder") {
  history h;
  history_recorder recorder(h);
  CHECK(h.epochs() == 0);
  const epoch_info first{.epoch = 0, .epochs = 2, .steps = 10};
  const epoch_info second{.epoch = 1, .epochs = 2, .steps = 10};
  recorder.on_epoch_end(first, make_logs({{"loss", 0.5}, {"accuracy", 0.8}, {"val_loss", 0.6}}));
  recorder.on_epoch_end(second, make_logs({{"loss", 0.25}, {"accuracy", 0.9}}));

  CHECK(h.epochs() == 2);
  CHECK(h["loss"] == std::vector<double>{0.5, 0.25});
  CHECK(h["accuracy"] == std::vector<double>{0.8, 0.9});
  CHECK(h["val_loss"] == std::vector<double>{0.6});  // validated in the first epoch only
  CHECK(h.contains("val_loss"));
  CHECK_FALSE(h.contains("val_accuracy"));
  CHECK(h.values.size() == 3);
}

TEST_CASE("history's operator[] names the missing key and the recorded ones") {
  history h;
  CHECK_THROWS_WITH_AS(h["loss"], "history has no metric \"loss\"; nothing has been recorded yet",
                       std::out_of_range);
  h.record(make_logs({{"loss", 0.5}, {"accuracy", 0.8}}));
  CHECK_THROWS_WITH_AS(h["val_loss"], "history has no metric \"val_loss\"; it recorded: accuracy, loss",
                       std::out_of_range);
}

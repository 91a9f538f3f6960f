// callbacks::csv_logger: Keras's CSVLogger, with its arguments.
//
//   tf::callbacks::csv_logger log("training.csv", {.separator = ",", .append = false});
//
// One row per epoch: the epoch (0-based, as Keras writes it), then every
// logged value in name order; the columns are fixed by the first epoch, with
// val_ columns added ("NA" until validation runs) when that epoch had none.
// The header is written unless appending to a file that already has lines.
// Values are written with the fewest digits that read back to the same
// double. Flushed after each row, so a crash keeps the rows written. A fit
// continued from a checkpoint cuts the file back to the rows the checkpoint
// had seen and appends to them under the same header, so the file reads as
// one uninterrupted run. The file is opened when the first row is written.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "typeflow/callbacks/callback.hpp"

namespace typeflow::callbacks {

struct csv_logger_options {
  std::string separator = ",";
  bool append = false;
};

class csv_logger : public callback {
 public:
  explicit csv_logger(std::filesystem::path filename, csv_logger_options options = {})
      : filename_(std::move(filename)), options_(std::move(options)) {}

  void on_train_begin() override {
    keys_.clear();
    file_.close();
    resume_bytes_.reset();
    std::error_code ec;
    start_bytes_ = options_.append && std::filesystem::exists(filename_) ? std::filesystem::file_size(filename_, ec) : 0;
  }

  std::string_view state_name() const override { return "csv_logger"; }
  // The file's length: what a continued fit keeps of it.
  void save_state(callback_state& s) const override {
    std::error_code ec;
    s.numbers["bytes"] = static_cast<double>(file_.is_open() ? std::filesystem::file_size(filename_, ec) : start_bytes_);
  }
  void load_state(const callback_state& s) override {
    if (const auto bytes = s.number("bytes")) resume_bytes_ = static_cast<std::uintmax_t>(*bytes);
  }

  void on_epoch_end(const epoch_info& info, const logs& l) override {
    if (!file_.is_open()) open();
    if (keys_.empty()) {
      for (const auto& e : l) keys_.emplace_back(e.name);
      std::sort(keys_.begin(), keys_.end());
      const bool has_validation =
          std::any_of(keys_.begin(), keys_.end(), [](const std::string& k) { return k.rfind("val_", 0) == 0; });
      if (!has_validation && !keys_.empty()) {
        const std::size_t n = keys_.size();
        for (std::size_t i = 0; i < n; ++i) keys_.push_back("val_" + keys_[i]);
      }
      if (write_header_) {
        file_ << "epoch";
        for (const auto& k : keys_) file_ << options_.separator << k;
        file_ << '\n';
      }
    }
    file_ << info.epoch;
    for (const auto& k : keys_) {
      file_ << options_.separator;
      if (const auto v = l.get(k)) {
        char text[32];
        const auto r = std::to_chars(text, text + sizeof text, *v);
        file_.write(text, r.ptr - text);
      } else {
        file_ << "NA";
      }
    }
    file_ << '\n';
    file_.flush();
    if (!file_) throw std::runtime_error("csv_logger: writing \"" + filename_.string() + "\" failed");
  }

  void on_train_end(const logs&) override { file_.close(); }

 private:
  void open() {
    std::error_code ec;
    const bool exists = std::filesystem::exists(filename_);
    if (resume_bytes_ && exists && std::filesystem::file_size(filename_, ec) > *resume_bytes_)
      std::filesystem::resize_file(filename_, *resume_bytes_, ec);  // the rows after the checkpoint go
    const bool keep = (options_.append || resume_bytes_) && exists;
    write_header_ = true;
    if (keep) {  // a file that has a header keeps it, and its columns
      std::ifstream in(filename_);
      std::string first;
      if (std::getline(in, first) && !first.empty()) {
        write_header_ = false;
        if (resume_bytes_ && first.rfind("epoch" + options_.separator, 0) == 0) {
          std::size_t at = 5 + options_.separator.size();
          while (at <= first.size()) {
            const std::size_t next = std::min(first.find(options_.separator, at), first.size());
            keys_.push_back(first.substr(at, next - at));
            at = next + options_.separator.size();
          }
        }
      }
    }
    file_.open(filename_, keep ? std::ios::app : std::ios::trunc);
    if (!file_) throw std::runtime_error("csv_logger: cannot open \"" + filename_.string() + "\" for writing");
  }

  std::filesystem::path filename_;
  csv_logger_options options_;
  std::ofstream file_;
  std::vector<std::string> keys_;
  bool write_header_ = true;
  std::uintmax_t start_bytes_ = 0;           // the file's length when training began (appending)
  std::optional<std::uintmax_t> resume_bytes_;  // a continued fit: its length at the checkpoint
};

}  // namespace typeflow::callbacks

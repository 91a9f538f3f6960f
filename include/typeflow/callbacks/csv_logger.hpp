// callbacks::csv_logger: Keras's CSVLogger, with its arguments.
//
//   tf::callbacks::csv_logger log("training.csv", {.separator = ",", .append = false});
//
// One row per epoch: the epoch (0-based, as Keras writes it), then every
// logged value in name order; the columns are fixed by the first epoch, with
// val_ columns added ("NA" until validation runs) when that epoch had none.
// The header is written unless appending to a file that already has lines.
// Values are written with the fewest digits that read back to the same
// double. Flushed after each row, so a crash keeps the rows written.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "typeflow/train/callback.hpp"

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
    write_header_ = true;
    if (options_.append && std::filesystem::exists(filename_)) {
      std::ifstream in(filename_);
      std::string first;
      write_header_ = !(std::getline(in, first) && !first.empty());
    }
    file_.close();
    file_.open(filename_, options_.append ? std::ios::app : std::ios::trunc);
    if (!file_) throw std::runtime_error("csv_logger: cannot open \"" + filename_.string() + "\" for writing");
  }

  void on_epoch_end(const epoch_info& info, const logs& l) override {
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
  std::filesystem::path filename_;
  csv_logger_options options_;
  std::ofstream file_;
  std::vector<std::string> keys_;
  bool write_header_ = true;
};

}  // namespace typeflow::callbacks

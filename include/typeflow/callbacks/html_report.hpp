// callbacks::html_report: one self-contained HTML file about the run,
// rewritten after every epoch, that any browser opens offline.
//
//   tf::callbacks::html_report report("run.html", {.title = "MNIST MLP"});
//   model.fit(train, {.epochs = 5, .validation_data = test, .callbacks = {&report}});
//
// The page holds, with nothing from elsewhere (inline CSS, inline SVG, and
// one line of inline script that counts the drawn charts' lines for tests):
//   - the status: epochs done of the fit's, steps, elapsed time, when written;
//   - the run's settings (model_access::settings(): policy, strategy, device,
//     optimizer, loss, metrics, batch size, parameters, FLOPs) and the fit's
//     (epochs, steps per epoch, validation);
//   - one chart per logged name (loss, each metric, learning_rate, loss_scale,
//     throughput, input_wait_fraction, mfu, ...) against the steps trained,
//     with the per-batch running values as a thin line, the epoch values as
//     dots and the validation values (val_<name>) as a dashed line with dots
//     on the same chart; epoch ends are marked on the x axis, and a series
//     that spans a factor of 50 or more gets a log axis (report/svg_chart.hpp);
//   - the epoch table (History's values), and the model summary.
//
// The file is written to <filename>.tmp and renamed over the old one, so a
// browser refreshing it never reads half a page. Under multi_worker only the
// chief writes. Per-batch values are kept once a step in memory (16 bytes a
// value); charts draw at most max_points points a series. A fit continued
// from a checkpoint starts the report's series afresh.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "typeflow/report/svg_chart.hpp"
#include "typeflow/callbacks/callback.hpp"

namespace typeflow::callbacks {

struct html_report_options {
  std::string title = "typeflow run";
  std::size_t max_points = 1000;  // per series and chart
  bool batch_values = true;       // keep and draw the per-batch running values
};

class html_report : public callback {
 public:
  explicit html_report(std::filesystem::path filename, html_report_options options = {})
      : filename_(std::move(filename)), options_(std::move(options)) {
    if (filename_.empty()) throw std::invalid_argument("html_report: the file name is empty");
    if (options_.max_points < 2)
      throw std::invalid_argument("html_report: max_points must be at least 2 (got " +
                                  std::to_string(options_.max_points) + ")");
  }

  const std::filesystem::path& filename() const noexcept { return filename_; }

  void on_train_begin() override {
    writing_ = !model() || model()->is_chief();
    batch_series_.clear();
    epoch_series_.clear();
    epoch_ends_.clear();
    steps_ = 0;
    started_ = std::chrono::steady_clock::now();
    started_wall_ = std::time(nullptr);
    if (!writing_) return;
    summary_ = model() ? model()->summary_text(0) : std::string();
    settings_ = model() ? model()->settings() : std::vector<std::pair<std::string, std::string>>{};
  }

  void on_epoch_begin(const epoch_info& info) override { info_ = info; }

  void on_batch_end(std::int64_t, const logs& batch_logs) override {
    ++steps_;
    if (!writing_ || !options_.batch_values) return;
    for (const log_entry& entry : batch_logs)
      batch_series_[std::string(entry.name)].emplace_back(static_cast<double>(steps_), entry.value);
  }

  void on_epoch_end(const epoch_info& info, const logs& epoch_logs) override {
    if (!writing_) return;
    info_ = info;
    epoch_ends_.push_back(steps_);
    for (const log_entry& entry : epoch_logs) epoch_series_[std::string(entry.name)].emplace_back(info.epoch, entry.value);
    write();
  }

  // The page as it would be written now.
  std::string html() const {
    std::string page =
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" + report::escape_markup(options_.title) +
        "</title>\n<style>\n"
        "body{font-family:sans-serif;margin:24px;color:#222;background:#fff}\n"
        "h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:24px 0 8px;border-bottom:1px solid #ddd}\n"
        ".status{color:#555;margin-bottom:8px}\n"
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}\n"
        "th{background:#f3f3f3}td.number{text-align:right;font-family:monospace}\n"
        ".charts{display:flex;flex-wrap:wrap;gap:12px}.charts figure{margin:0;border:1px solid #e3e3e3;padding:4px}\n"
        "pre{font-size:12px;background:#f7f7f7;padding:8px;overflow-x:auto}\n"
        "</style></head><body>\n";
    page += "<h1>" + report::escape_markup(options_.title) + "</h1>\n";
    page += "<div class=\"status\">" + status() + "</div>\n";
    page += "<h2>Charts</h2>\n<div class=\"charts\">\n" + charts() + "</div>\n";
    page += "<h2>Epochs</h2>\n" + epoch_table();
    page += "<h2>Settings</h2>\n" + settings_table();
    if (!summary_.empty()) page += "<h2>Model</h2>\n<pre>" + report::escape_markup(summary_) + "</pre>\n";
    // The one script: after layout, the body records how many series paths
    // the browser drew with a size, which a test reads from the DOM.
    page += "<script>document.body.dataset.renderedPaths=[...document.querySelectorAll('svg path.series')]"
            ".filter(p=>{const b=p.getBBox();return b.width>0||b.height>0;}).length;</script>\n";
    page += "</body></html>\n";
    return page;
  }

 private:
  // "train" and "validation" share a chart: the names without "val_".
  std::vector<std::string> chart_names() const {
    std::vector<std::string> names;
    const auto add = [&](const std::string& name) {
      const std::string base = name.starts_with("val_") ? name.substr(4) : name;
      if (std::find(names.begin(), names.end(), base) == names.end()) names.push_back(base);
    };
    for (const auto& [name, values] : epoch_series_) add(name);
    for (const auto& [name, values] : batch_series_) add(name);
    // loss first, then the rest by name.
    std::stable_partition(names.begin(), names.end(), [](const std::string& n) { return n == "loss"; });
    return names;
  }

  std::string charts() const {
    std::string out;
    std::vector<std::pair<double, std::string>> marks;
    for (std::size_t e = 0; e < epoch_ends_.size(); ++e)
      marks.emplace_back(static_cast<double>(epoch_ends_[e]), "epoch " + std::to_string(first_epoch() + e + 1));
    for (const std::string& name : chart_names()) {
      std::vector<report::series> lines;
      if (const auto found = batch_series_.find(name); found != batch_series_.end())
        lines.push_back({.label = "train (batches)", .points = found->second, .color = "#9ecae1"});
      if (const auto found = epoch_series_.find(name); found != epoch_series_.end())
        lines.push_back({.label = "train (epochs)", .points = at_epoch_ends(found->second), .color = "#1f77b4", .markers = true});
      if (const auto found = epoch_series_.find("val_" + name); found != epoch_series_.end())
        lines.push_back({.label = "validation", .points = at_epoch_ends(found->second), .color = "#d62728", .markers = true,
                         .dashed = true});
      out += "<figure data-name=\"" + report::escape_markup(name) + "\">" +
             report::svg_chart({.title = name, .x_label = "step (batches trained)", .max_points = options_.max_points,
                                .x_marks = marks},
                               lines) +
             "</figure>\n";
    }
    return out;
  }

  std::size_t first_epoch() const {
    if (epoch_series_.empty()) return 0;
    return static_cast<std::size_t>(epoch_series_.begin()->second.front().first);
  }

  // (epoch, value) as (the step at that epoch's end, value).
  std::vector<std::pair<double, double>> at_epoch_ends(const std::vector<std::pair<double, double>>& by_epoch) const {
    std::vector<std::pair<double, double>> out;
    const double first = by_epoch.empty() ? 0 : static_cast<double>(first_epoch());
    for (const auto& [epoch, value] : by_epoch) {
      const auto index = static_cast<std::size_t>(epoch - first);
      if (index < epoch_ends_.size()) out.emplace_back(static_cast<double>(epoch_ends_[index]), value);
    }
    return out;
  }

  std::string status() const {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    char when[64] = "";
    const std::time_t now = std::time(nullptr);
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
    return "epoch " + std::to_string(info_.epoch + 1) + " of " + std::to_string(info_.epochs) + " &middot; " +
           std::to_string(steps_) + " steps &middot; " + report::detail::number(seconds, "%.1f") +
           " s &middot; written " + when;
  }

  std::string epoch_table() const {
    if (epoch_series_.empty()) return "<p>No epoch has ended yet.</p>\n";
    std::string out = "<table class=\"epochs\"><tr><th>epoch</th>";
    for (const auto& [name, values] : epoch_series_) out += "<th>" + report::escape_markup(name) + "</th>";
    out += "</tr>\n";
    const std::size_t first = first_epoch();
    for (std::size_t e = 0; e < epoch_ends_.size(); ++e) {
      out += "<tr><td class=\"number\">" + std::to_string(first + e + 1) + "</td>";
      for (const auto& [name, values] : epoch_series_) {
        std::string cell;
        for (const auto& [epoch, value] : values)
          if (static_cast<std::size_t>(epoch) == first + e) cell = report::detail::number(value, "%.5g");
        out += "<td class=\"number\">" + cell + "</td>";
      }
      out += "</tr>\n";
    }
    return out + "</table>\n";
  }

  std::string settings_table() const {
    std::vector<std::pair<std::string, std::string>> rows = settings_;
    rows.emplace_back("epochs", std::to_string(info_.epochs));
    rows.emplace_back("steps per epoch", info_.steps >= 0 ? std::to_string(info_.steps) : "unknown");
    rows.emplace_back("validation", epoch_series_.contains("val_loss") ? "yes" : "no");
    char started[64] = "";
    std::strftime(started, sizeof started, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&started_wall_));
    rows.emplace_back("started", started);
    std::string out = "<table class=\"settings\">\n";
    for (const auto& [name, value] : rows)
      out += "<tr><th>" + report::escape_markup(name) + "</th><td>" + report::escape_markup(value) + "</td></tr>\n";
    return out + "</table>\n";
  }

  void write() const {
    const std::string page = html();
    std::filesystem::path temporary = filename_;
    temporary += ".tmp";
    if (filename_.has_parent_path()) {
      std::error_code ignored;
      std::filesystem::create_directories(filename_.parent_path(), ignored);
    }
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      if (!out) throw std::runtime_error("html_report: cannot open \"" + temporary.string() + "\" for writing");
      out.write(page.data(), static_cast<std::streamsize>(page.size()));
      out.close();
      if (!out) throw std::runtime_error("html_report: writing \"" + temporary.string() + "\" failed");
    }
    std::error_code error;
    std::filesystem::rename(temporary, filename_, error);
    if (error)
      throw std::runtime_error("html_report: cannot replace \"" + filename_.string() + "\": " + error.message());
  }

  std::filesystem::path filename_;
  html_report_options options_;
  bool writing_ = true;
  epoch_info info_{};
  std::int64_t steps_ = 0;
  std::chrono::steady_clock::time_point started_{};
  std::time_t started_wall_ = 0;
  std::string summary_;
  std::vector<std::pair<std::string, std::string>> settings_;
  std::map<std::string, std::vector<std::pair<double, double>>> batch_series_;  // name -> (step, value)
  std::map<std::string, std::vector<std::pair<double, double>>> epoch_series_;  // name -> (epoch, value)
  std::vector<std::int64_t> epoch_ends_;  // the step count at each recorded epoch's end
};

}  // namespace typeflow::callbacks

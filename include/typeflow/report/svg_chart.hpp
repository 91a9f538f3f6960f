// svg_chart: a line chart as one inline <svg> element, for the HTML report
// (callbacks/html_report.hpp). No script, no external file: the markup is
// the picture.
//
//   report::svg_chart({.title = "loss", .x_label = "step"},
//                     {{.label = "train", .points = {{1, 2.3}, {2, 1.9}}},
//                      {.label = "validation", .points = {{4, 1.7}}, .markers = true}});
//
// Each series is one <path class="series"> (markers add <circle>s), drawn
// in the order given over axes with "nice" ticks (1, 2, 5 x 10^k). The y axis
// is logarithmic when every value is positive and they span a factor of 50 or
// more (a loss falling from 2 to 0.01), linear otherwise. A non-finite value
// (a NaN loss) breaks its line instead of bending the axes. Series longer
// than max_points are drawn from the means of max_points equal runs of
// points, so a million steps make a chart of the same size as a thousand.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace typeflow::report {

struct series {
  std::string label;
  std::vector<std::pair<double, double>> points{};  // (x, y), x ascending
  std::string color = "#1f77b4";
  bool markers = false;  // a dot on each point (epoch values)
  bool dashed = false;
};

struct chart_options {
  std::string title;
  std::string x_label = "step";
  int width = 480, height = 290;
  std::size_t max_points = 1000;
  // Dashed vertical lines, labelled at the plot's top (e.g. each epoch's end).
  std::vector<std::pair<double, std::string>> x_marks{};
};

// Text safe inside HTML and SVG markup.
inline std::string escape_markup(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace detail {

inline std::string number(double v, const char* format = "%.6g") {
  char text[64];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

// Ticks at 1, 2 or 5 times a power of ten, about `count` of them over [low, high].
inline std::vector<double> nice_ticks(double low, double high, int count = 5) {
  if (!(high > low)) return {low};
  const double raw = (high - low) / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * power) {
      step = m * power;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(low / step) * step; t <= high + step * 1e-9; t += step)
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

// Means of max_points equal runs of consecutive finite points; non-finite
// points are kept, so that the line still breaks there.
inline std::vector<std::pair<double, double>> thinned(const std::vector<std::pair<double, double>>& points,
                                                      std::size_t max_points) {
  if (points.size() <= max_points || max_points == 0) return points;
  std::vector<std::pair<double, double>> out;
  const double per = static_cast<double>(points.size()) / static_cast<double>(max_points);
  for (std::size_t b = 0; b < max_points; ++b) {
    const auto begin = static_cast<std::size_t>(b * per), end = std::min(points.size(), static_cast<std::size_t>((b + 1) * per));
    double x = 0, y = 0;
    std::size_t n = 0;
    bool broken = false;
    for (std::size_t i = begin; i < end; ++i) {
      if (!std::isfinite(points[i].second)) {
        broken = true;
        continue;
      }
      x += points[i].first, y += points[i].second, ++n;
    }
    if (broken) out.emplace_back(points[begin].first, std::numeric_limits<double>::quiet_NaN());
    if (n > 0) out.emplace_back(x / n, y / n);
  }
  return out;
}

}  // namespace detail

inline std::string svg_chart(const chart_options& options, const std::vector<series>& all) {
  const double left = 62, right = 30, top = 28, bottom = 52;
  const double plot_w = options.width - left - right, plot_h = options.height - top - bottom;
  std::vector<std::vector<std::pair<double, double>>> drawn;
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min, y_min = x_min, y_max = -x_min;
  bool all_positive = true;
  for (const auto& s : all) {
    drawn.push_back(detail::thinned(s.points, options.max_points));
    for (const auto& [x, y] : drawn.back()) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x_min = std::min(x_min, x), x_max = std::max(x_max, x);
      y_min = std::min(y_min, y), y_max = std::max(y_max, y);
      all_positive = all_positive && y > 0;
    }
  }
  const bool empty = !(x_max >= x_min);
  if (empty) x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  if (x_max == x_min) x_min -= 1, x_max += 1;
  const bool log_y = !empty && all_positive && y_max / y_min >= 50;
  const auto y_value = [&](double y) { return log_y ? std::log10(y) : y; };
  double low = y_value(y_min), high = y_value(y_max);
  if (high == low) {
    const double pad = low == 0 ? 1 : std::fabs(low) * 0.1;
    low -= pad, high += pad;
  } else if (!log_y) {
    const double pad = (high - low) * 0.05;
    low -= pad, high += pad;
  }
  const auto px = [&](double x) { return left + (x - x_min) / (x_max - x_min) * plot_w; };
  const auto py = [&](double y) { return top + (1 - (y_value(y) - low) / (high - low)) * plot_h; };
  using detail::number;

  std::string svg = "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(options.width) +
                    "\" height=\"" + std::to_string(options.height) + "\" viewBox=\"0 0 " +
                    std::to_string(options.width) + " " + std::to_string(options.height) +
                    "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  svg += "<text x=\"" + number(left) + "\" y=\"17\" font-size=\"13\" font-weight=\"bold\">" +
         escape_markup(options.title) + (log_y ? " (log scale)" : "") + "</text>\n";
  svg += "<rect x=\"" + number(left) + "\" y=\"" + number(top) + "\" width=\"" + number(plot_w) + "\" height=\"" +
         number(plot_h) + "\" fill=\"#fafafa\" stroke=\"#999\"/>\n";
  // y ticks: decades (and 2, 5 between them when few) on a log axis.
  std::vector<double> y_ticks;
  if (log_y) {
    for (double d = std::floor(low); d <= std::ceil(high); ++d)
      for (double m : {1.0, 2.0, 5.0}) {
        const double t = m * std::pow(10.0, d);
        if (std::log10(t) >= low - 1e-9 && std::log10(t) <= high + 1e-9 && (m == 1.0 || high - low < 2)) y_ticks.push_back(t);
      }
  } else {
    y_ticks = detail::nice_ticks(low, high);
  }
  for (double t : y_ticks) {
    const double y = py(t);
    svg += "<line x1=\"" + number(left) + "\" y1=\"" + number(y) + "\" x2=\"" + number(left + plot_w) + "\" y2=\"" +
           number(y) + "\" stroke=\"#e4e4e4\"/><text x=\"" + number(left - 4) + "\" y=\"" + number(y + 4) +
           "\" text-anchor=\"end\">" + number(t, "%.3g") + "</text>\n";
  }
  // x: numbers below the axis; the marks (epoch ends) as dashed lines, labelled
  // inside the plot's top edge ("epoch 3", or "3" when there are many).
  for (double t : detail::nice_ticks(x_min, x_max))
    svg += "<text x=\"" + number(px(t)) + "\" y=\"" + number(top + plot_h + 14) + "\" text-anchor=\"middle\">" +
           number(t, "%.6g") + "</text>\n";
  const std::size_t every = (options.x_marks.size() + 11) / 12;  // at most about 12 labels
  for (std::size_t i = 0; i < options.x_marks.size(); ++i) {
    const auto& [x, label] = options.x_marks[i];
    if (x < x_min || x > x_max) continue;
    svg += "<line class=\"mark\" x1=\"" + number(px(x)) + "\" y1=\"" + number(top) + "\" x2=\"" + number(px(x)) +
           "\" y2=\"" + number(top + plot_h) + "\" stroke=\"#c8c8c8\" stroke-dasharray=\"3,3\"/>";
    if (i % every == 0 || i + 1 == options.x_marks.size()) {
      const std::string shown = options.x_marks.size() > 6 && label.find(' ') != std::string::npos
                                    ? label.substr(label.rfind(' ') + 1)
                                    : label;
      svg += "<text x=\"" + number(px(x) - 3) + "\" y=\"" + number(top + 11) +
             "\" text-anchor=\"end\" fill=\"#888\" font-size=\"10\">" + escape_markup(shown) + "</text>";
    }
    svg += "\n";
  }
  svg += "<text x=\"" + number(left + plot_w / 2) + "\" y=\"" + number(top + plot_h + 30) +
         "\" text-anchor=\"middle\" fill=\"#555\">" + escape_markup(options.x_label) + "</text>\n";
  // The series, then their legend along the bottom.
  double legend_x = left;
  for (std::size_t s = 0; s < all.size(); ++s) {
    std::string d;
    bool pen_down = false;
    for (const auto& [x, y] : drawn[s]) {
      if (!std::isfinite(y) || !std::isfinite(x)) {
        pen_down = false;
        continue;
      }
      d += (pen_down ? " L" : (d.empty() ? "M" : " M")) + number(px(x), "%.1f") + " " + number(py(y), "%.1f");
      pen_down = true;
    }
    if (!d.empty()) {
      // A lone point still shows: a zero-length segment with round caps.
      if (d.find('L') == std::string::npos) d += " l0.01 0";
      svg += "<path class=\"series\" data-label=\"" + escape_markup(all[s].label) + "\" d=\"" + d +
             "\" fill=\"none\" stroke=\"" + all[s].color + "\" stroke-width=\"" + (all[s].markers ? "2" : "1.5") +
             "\" stroke-linecap=\"round\"" + (all[s].dashed ? " stroke-dasharray=\"5,3\"" : "") + "/>\n";
      if (all[s].markers)
        for (const auto& [x, y] : drawn[s])
          if (std::isfinite(x) && std::isfinite(y))
            svg += "<circle cx=\"" + number(px(x), "%.1f") + "\" cy=\"" + number(py(y), "%.1f") + "\" r=\"3\" fill=\"" +
                   all[s].color + "\"><title>" + escape_markup(all[s].label) + ": " + number(y) + "</title></circle>\n";
    }
    const double legend_y = options.height - 8;
    svg += "<line x1=\"" + number(legend_x) + "\" y1=\"" + number(legend_y - 4) + "\" x2=\"" + number(legend_x + 18) +
           "\" y2=\"" + number(legend_y - 4) + "\" stroke=\"" + all[s].color + "\" stroke-width=\"2\"" +
           (all[s].dashed ? " stroke-dasharray=\"5,3\"" : "") + "/><text x=\"" + number(legend_x + 22) + "\" y=\"" +
           number(legend_y) + "\">" + escape_markup(all[s].label) + "</text>\n";
    legend_x += 30 + 6.5 * static_cast<double>(all[s].label.size());
  }
  return svg + "</svg>\n";
}

}  // namespace typeflow::report

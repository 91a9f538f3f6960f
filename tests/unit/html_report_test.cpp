// callbacks::html_report and report::svg_chart: one self-contained page per
// run, rewritten each epoch, with a chart per logged name (train and
// validation together), the settings, the epoch table and the summary; and,
// where Debian's chromium is installed, the page loaded in headless Chromium,
// its drawn chart lines counted through the DOM and a screenshot saved.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include <typeflow/callbacks/html_report.hpp>
#include <typeflow/report/svg_chart.hpp>
#include <typeflow/typeflow.hpp>

#include "../support/command_output.hpp"
#include "../support/test_support.hpp"
#include "../support/toy_classifier.hpp"

namespace tf = typeflow;
namespace fs = std::filesystem;
namespace tf_testing = typeflow::testing;

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t count = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

// The markup of the chart figure named `name`, or empty.
std::string figure_of(const std::string& page, const std::string& name) {
  const auto begin = page.find("<figure data-name=\"" + name + "\">");
  if (begin == std::string::npos) return {};
  return page.substr(begin, page.find("</figure>", begin) - begin);
}

// Debian's chromium, or empty.
std::string chromium() {
  for (const char* candidate : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (fs::exists(candidate)) return candidate;
  return {};
}

using tf_testing::toy_data;
using tf_testing::toy_net;

// Fits the toy model for `epochs` with the report (and `after`, run after it).
tf::history fit_with_report(tf::callbacks::html_report& report, int epochs, tf::callback* after = nullptr) {
  toy_data toy(128);
  auto train = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::batch<16>;
  auto validation = tf::data::from_tensor_slices<tf::shape<8>>(toy.features, toy.labels) | tf::data::batch<16>;
  tf::model<toy_net> model{11};
  model.compile(tf::optimizers::adam{.learning_rate = 0.02f}, tf::losses::sparse_categorical_crossentropy{.from_logits = true},
                tf::metrics::accuracy{});
  std::vector<tf::callback*> callbacks{&report};
  if (after) callbacks.push_back(after);
  return model.fit(train, {.epochs = epochs, .validation_data = validation, .callbacks = callbacks, .verbose = 0});
}

}  // namespace

TEST_CASE("svg_chart draws one path per series, breaks a line at NaN and picks a log axis for wide ranges") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::string linear = tf::report::svg_chart(
      {.title = "accuracy"}, {{.label = "train", .points = {{1, 0.5}, {2, 0.7}, {3, nan}, {4, 0.8}, {5, 0.9}}},
                              {.label = "validation <val>", .points = {{5, 0.85}}, .markers = true}});
  CHECK(count_of(linear, "<path class=\"series\"") == 2);
  CHECK(linear.find("(log scale)") == std::string::npos);
  const auto train_path = linear.substr(linear.find("data-label=\"train\""));
  CHECK(count_of(train_path.substr(0, train_path.find("/>")), "M") == 2);  // the NaN breaks the line in two
  CHECK(linear.find("validation &lt;val&gt;") != std::string::npos);     // labels are escaped
  CHECK(count_of(linear, "<circle") == 1);
  const std::string wide = tf::report::svg_chart({.title = "loss"}, {{.label = "train", .points = {{1, 2.0}, {2, 0.01}}}});
  CHECK(wide.find("loss (log scale)") != std::string::npos);
  const std::string negative = tf::report::svg_chart({.title = "x"}, {{.label = "t", .points = {{1, -2.0}, {2, 300.0}}}});
  CHECK(negative.find("(log scale)") == std::string::npos);
  // Epoch ends as dashed lines; with many, at most about 12 labels, numbers only.
  tf::report::chart_options marked{.title = "t"};
  for (int e = 1; e <= 40; ++e) marked.x_marks.emplace_back(10.0 * e, "epoch " + std::to_string(e));
  const std::string forty = tf::report::svg_chart(marked, {{.label = "t", .points = {{0, 1.0}, {400, 2.0}}}});
  CHECK(count_of(forty, "<line class=\"mark\"") == 40);
  CHECK(forty.find(">epoch ") == std::string::npos);
  CHECK(forty.find(">40</text>") != std::string::npos);
  CHECK(count_of(forty, "fill=\"#888\"") <= 14);
  // 10,000 points are drawn as at most max_points.
  tf::report::series many{.label = "train"};
  for (int i = 0; i < 10000; ++i) many.points.emplace_back(i, 1.0 + (i % 7));
  const std::string thinned = tf::report::svg_chart({.title = "t", .max_points = 200}, {many});
  CHECK(count_of(thinned, " L") == 199);
}

TEST_CASE("html_report writes one self-contained page with a chart per logged name, train and validation together") {
  tf_testing::temp_dir dir("typeflow_html_report_test_page");
  tf::callbacks::html_report report(dir.path / "reports" / "run.html", {.title = "toy <run>"});
  const auto history = fit_with_report(report, 3);
  const std::string page = read_text(dir.path / "reports" / "run.html");
  CHECK_FALSE(fs::exists(dir.path / "reports" / "run.html.tmp"));
  INFO(page.substr(0, 2000));
  // Self-contained: nothing loaded from elsewhere.
  CHECK(page.find("<script src") == std::string::npos);
  CHECK(page.find("<link") == std::string::npos);
  CHECK(page.find("<img") == std::string::npos);
  CHECK(std::regex_search(page, std::regex("https?://")) == (page.find("http://www.w3.org/2000/svg") != std::string::npos));
  CHECK(page.find("<title>toy &lt;run&gt;</title>") != std::string::npos);
  // One chart per name fit logs; val_ names share their training name's chart.
  for (const auto& [name, values] : history.values) {
    CAPTURE(name);
    const std::string chart_name = name.starts_with("val_") ? name.substr(4) : name;
    CHECK_FALSE(figure_of(page, chart_name).empty());
  }
  CHECK(count_of(page, "<figure") == history.values.size() - 2);  // val_loss and val_accuracy share
  const std::string loss = figure_of(page, "loss");
  CHECK(count_of(loss, "<path class=\"series\"") == 3);  // per batch, per epoch, validation
  CHECK(count_of(loss, "data-label=\"validation\"") == 1);
  CHECK(count_of(loss, "<circle") == 6);                  // 3 epochs, train and validation
  CHECK(count_of(loss, ">epoch 3<") == 1);                // epoch ends marked on the x axis
  CHECK(count_of(figure_of(page, "learning_rate"), "<path class=\"series\"") == 2);  // no validation value
  // The epoch table: History's values.
  const auto table = page.substr(page.find("<table class=\"epochs\">"));
  CHECK(count_of(table.substr(0, table.find("</table>")), "<tr>") == 4);  // a header and three epochs
  char last_loss[32];
  std::snprintf(last_loss, sizeof last_loss, "%.5g", history["val_loss"].back());
  CHECK(table.find(last_loss) != std::string::npos);
  // Settings and the model summary.
  CHECK(page.find("<th>optimizer</th><td>adam</td>") != std::string::npos);
  CHECK(page.find("<th>batch size</th><td>16</td>") != std::string::npos);
  CHECK(page.find("<th>steps per epoch</th><td>8</td>") != std::string::npos);
  CHECK(page.find("layers.1 (dense&lt;16&gt;)") != std::string::npos);
  CHECK(page.find("Total params: " + tf::detail::with_thousands(toy_net::parameter_count)) != std::string::npos);
}

TEST_CASE("html_report rewrites the page after every epoch") {
  tf_testing::temp_dir dir("typeflow_html_report_test_epochs");
  const fs::path file = dir.path / "run.html";
  tf::callbacks::html_report report(file);
  std::vector<std::size_t> circles;
  tf::callbacks::lambda_callback reader({.on_epoch_end = [&](int, const tf::logs&) {
    circles.push_back(count_of(figure_of(read_text(file), "loss"), "<circle"));
  }});
  fit_with_report(report, 3, &reader);
  CHECK(circles == std::vector<std::size_t>{2, 4, 6});
  CHECK_THROWS_AS(tf::callbacks::html_report(""), std::invalid_argument);
  CHECK_THROWS_WITH_AS(tf::callbacks::html_report("x.html", {.max_points = 1}), doctest::Contains("max_points"),
                       std::invalid_argument);
  tf::callbacks::html_report unwritable(dir.path / "run.html" / "inside.html");  // a file where a directory must be
  CHECK_THROWS_WITH_AS(fit_with_report(unwritable, 1), doctest::Contains("html_report: cannot open"), std::runtime_error);
}

TEST_CASE("html_report in headless Chromium: every chart line is drawn, and a screenshot is saved") {
  const std::string browser = chromium();
  if (browser.empty()) {
    MESSAGE("skipped: Debian's chromium is not installed (scripts/setup.sh installs it)");
    return;
  }
  tf_testing::temp_dir dir("typeflow_html_report_test_chromium");
  const fs::path file = dir.path / "run.html";
  tf::callbacks::html_report report(file, {.title = "typeflow: a toy classifier, 4 epochs"});
  fit_with_report(report, 4);
  const std::string page = read_text(file);
  const std::size_t paths = count_of(page, "<path class=\"series\"");
  REQUIRE(paths > 0);
  const std::string flags = " --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir=" +
                            (dir.path / "profile").string() + " ";
  const std::string dom = tf_testing::command_output("timeout 120 " + browser + flags + "--dump-dom file://" + file.string() +
                                       " 2>/dev/null");
  INFO(dom.substr(0, 400));
  // The page's own script counted the series paths that have a size after layout.
  std::smatch match;
  REQUIRE(std::regex_search(dom, match, std::regex("data-rendered-paths=\"([0-9]+)\"")));
  CHECK(std::stoul(match[1].str()) == paths);
  CHECK(count_of(dom, "<svg") == count_of(page, "<svg"));
  // The screenshot lands in the working directory (build/tests under ctest).
  const fs::path screenshot = fs::absolute("html_report_screenshot.png");
  fs::remove(screenshot);
  tf_testing::command_output("timeout 120 " + browser + flags + "--window-size=1100,1300 --screenshot=" + screenshot.string() +
               " file://" + file.string() + " >/dev/null 2>&1");
  REQUIRE(fs::exists(screenshot));
  const std::string png = read_text(screenshot);
  CHECK(png.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  CHECK(png.size() > 20000);  // a page of charts, not a blank one
  MESSAGE("screenshot: " << screenshot.string());
}

// summary(): nested blocks as indented rows (Keras's expand_nested), a
// repeat<N, block> shown once with xN, columns fitted to their longest
// entry, and no line wider than the width it is given.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <typeflow/typeflow.hpp>

namespace tf = typeflow;

namespace {

using block = tf::sequential<tf::residual<tf::layer_norm, tf::causal_self_attention<2>>,
                             tf::residual<tf::layer_norm, tf::dense<64>, tf::gelu, tf::dense<32>>>;
using gpt = tf::sequential<tf::typed_input<tf::int32, 16>, tf::embedding<20, 32>, tf::positional_embedding<16>,
                           tf::repeat<3, tf::recompute<block>>, tf::layer_norm, tf::dense<20>>;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The line that contains text; fails the test when none does.
std::string line_with(const std::string& summary, const std::string& text) {
  for (const auto& line : lines_of(summary))
    if (line.find(text) != std::string::npos) return line;
  FAIL("no line contains \"" << text << "\" in\n" << summary);
  return {};
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t count = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

// The indentation of the label: spaces after the table's leading space.
std::size_t indent_of(const std::string& line) { return line.find_first_not_of(' ') - 1; }

}  // namespace

TEST_CASE("summary expands a repeat once with xN and indents the block's layers") {
  const std::string text = tf::summary_text<gpt>();
  INFO(text);
  const std::string repeat_row = line_with(text, "layers.3 (repeat<3, ...>)");
  CHECK(indent_of(repeat_row) == 0);
  // The block once, marked x3, with one copy's parameters; the repeat's row has all three.
  const std::string block_row = line_with(text, "recompute<...> x3");
  CHECK(indent_of(block_row) == 2);
  constexpr std::size_t copy = gpt::layer<3>::params::parameter_count / 3;
  CHECK(block_row.find(tf::detail::with_thousands(copy)) != std::string::npos);
  CHECK(repeat_row.find(tf::detail::with_thousands(3 * copy)) != std::string::npos);
  CHECK(count_of(text, " x3") == 1);
  // Inside: sequential, two residuals, then the leaves named as their parameters are.
  CHECK(indent_of(line_with(text, "sequential<...>")) == 4);
  CHECK(count_of(text, "residual<") == 2);
  const std::string attention = line_with(text, "attn (causal_self_attention<2>)");
  CHECK(indent_of(attention) == 8);
  CHECK(attention.find("(None, 16, 32)") != std::string::npos);
  CHECK(attention.find(tf::detail::with_thousands(32 * 96 + 96 + 32 * 32 + 32)) != std::string::npos);
  CHECK(line_with(text, "layer_norm_1 (layer_norm)").find("64") != std::string::npos);  // gamma and beta of 32
  CHECK(line_with(text, "dense (dense<64>)").find("(None, 16, 64)") != std::string::npos);
  CHECK(line_with(text, "dense_1 (dense<32>)").find("2,080") != std::string::npos);  // 64 * 32 + 32
  CHECK(indent_of(line_with(text, " gelu")) == 8);
  // Every name a leaf row shows is the middle of a real parameter name.
  for (const char* parameter :
       {"attn.qkv.kernel", "layer_norm.gamma", "layer_norm_1.gamma", "dense.kernel", "dense_1.kernel"})
    CHECK_NOTHROW(tf::parameter_table<gpt>::find(std::string("blocks.2.") + parameter));
  // The top-level layers after the repeat are not indented.
  CHECK(indent_of(line_with(text, "layers.4 (layer_norm)")) == 0);
  CHECK(text.find("Total params: " + tf::detail::with_thousands(gpt::parameter_count)) != std::string::npos);
}

TEST_CASE("summary fits its columns to the longest name, with every row aligned") {
  const std::string text = tf::summary_text<gpt>();
  INFO(text);
  const auto lines = lines_of(text);
  const std::string header = line_with(text, "Layer (type)");
  const std::size_t shape_column = header.find("Output Shape");
  const std::size_t param_column = header.find("Param #");
  REQUIRE(shape_column != std::string::npos);
  std::size_t longest_label = 0;
  for (const auto& line : lines) {
    const auto shape = line.find("(None");
    if (line.starts_with(" ") && shape != std::string::npos && line.find("Layer") == std::string::npos) {
      // Each row's shape starts in the header's column, after its label and a space.
      CHECK(shape == shape_column);
      longest_label = std::max(longest_label, line.find_last_not_of(' ', shape - 1));
    }
  }
  CHECK(longest_label + 2 == shape_column);  // the longest label decides the column, with one space after it
  CHECK(param_column > shape_column);
  // The rules are as wide as the header's columns.
  CHECK(lines[1].find_first_not_of('_') == std::string::npos);
  CHECK(lines[1].size() >= header.size());
}

TEST_CASE("summary keeps every line within the width it is given") {
  const std::size_t unlimited = [] {
    std::size_t widest = 0;
    for (const auto& line : lines_of(tf::summary_text<gpt>())) widest = std::max(widest, line.size());
    return widest;
  }();
  REQUIRE(unlimited > 90);
  for (std::size_t width : {std::size_t{100}, std::size_t{80}, std::size_t{60}, std::size_t{40}}) {
    const std::string text = tf::summary_text<gpt>(width);
    CAPTURE(width);
    INFO(text);
    for (const auto& line : lines_of(text)) CHECK(line.size() <= width);
    CHECK(text.find("Output Shape") != std::string::npos);  // the shapes stay
    CHECK(text.find("Total params: " + tf::detail::with_thousands(gpt::parameter_count)) != std::string::npos);
  }
  // At 80 columns the names are whole and the optional columns go first.
  const std::string eighty = tf::summary_text<gpt>(80);
  CHECK(eighty.find("attn (causal_self_attention<2>)") != std::string::npos);
  CHECK(eighty.find("Output bytes") == std::string::npos);
  // At 40 names are cut with "...".
  CHECK(tf::summary_text<gpt>(40).find("...") != std::string::npos);
}

TEST_CASE("summary prints within the COLUMNS width when the stream is not a terminal") {
  char buffer[16384] = {};
  std::FILE* out = fmemopen(buffer, sizeof buffer - 1, "w");
  REQUIRE(out != nullptr);
  tf::model<gpt> model;
  ::setenv("COLUMNS", "72", 1);
  model.summary(out);
  ::unsetenv("COLUMNS");
  std::fclose(out);
  const std::string text = buffer;
  INFO(text);
  REQUIRE(text.find("layers.3 (repeat<3, ...>)") != std::string::npos);
  for (const auto& line : lines_of(text)) CHECK(line.size() <= 72);
}

TEST_CASE("summary of a flat network keeps Keras's column widths") {
  using flat = tf::sequential<tf::input<8>, tf::dense<4>, tf::relu, tf::dense<2>>;
  const std::string text = tf::summary_text<flat>();
  INFO(text);
  const std::string header = line_with(text, "Layer (type)");
  CHECK(header.find("Output Shape") == 29);  // " " + 27 + " "
  CHECK(header.find("Dtype") == 51);
  CHECK(header.find("Param #") == 62);
  const std::string row = line_with(text, "layers.1 (dense<4>)");
  CHECK(row.find("36") == 62);  // 8 * 4 + 4
}

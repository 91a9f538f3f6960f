// print_summary<Net>: Keras's model.summary() table, nested blocks expanded.
//
//   Model: "sequential"  (policy: float32)
//   ____________________________________________________________________________________________ ...
//    Layer (type)                            Output Shape          Dtype      Param #      Trainable    Output bytes
//   ============================================================================================ ...
//    input                                   (None, 16)            int32      0            0            64 B
//    layers.1 (frozen<...>)                  (None, 16, 32)        float32    1,152        0            2.00 KB
//      embedding (embedding<20, 32>)         (None, 16, 32)        float32    640          0
//      positional_embedding (positional_...  (None, 16, 32)        float32    512          0
//    layers.2 (repeat<3, ...>)               (None, 16, 32)        float32    25,632       25,632       2.00 KB
//      recompute<...> x3                     (None, 16, 32)        float32    8,544        8,544
//        sequential<...>                     (None, 16, 32)        float32    8,544        8,544
//          residual<...>                     (None, 16, 32)        float32    4,288        4,288
//            layer_norm (layer_norm)         (None, 16, 32)        float32    64           64
//            attn (causal_self_attention<2>) (None, 16, 32)        float32    4,224        4,224
//          residual<...>                     (None, 16, 32)        float32    4,256        4,256
//            layer_norm_1 (layer_norm)       (None, 16, 32)        float32    64           64
//            dense (dense<64>)               (None, 16, 64)        float32    2,112        2,112
//            gelu                            (None, 16, 64)        float32    0            0
//            dense_1 (dense<32>)             (None, 16, 32)        float32    2,080        2,080
//    layers.3 (layer_norm)                   (None, 16, 32)        float32    64           64           2.00 KB
//   ...
//
// A combinator (residual, recompute, repeat, frozen, a nested sequential)
// is a row with its own output shape and parameter count, and its children
// follow it, indented two spaces a level. repeat<N, block> shows the block
// once, marked "xN", with one copy's parameters (the repeat's row has all N
// copies'). A leaf inside a combinator is named as its parameters are
// ("attn", "dense_1": see chain.hpp), so the row reads like the weights
// file. A combinator's type is cut to "kind<...>" when its full name is
// long, since its children say the rest. Output bytes are a top-level
// layer's stored output per sample; the children's live in their
// combinator's workspace, which the total does not count.
//
// Column widths fit the longest entry. A width limit (the terminal's columns
// when out is a terminal, else $COLUMNS, else none; or the line_length
// given) narrows the table: first the columns lose their Keras-like minimum
// widths, then Output bytes, Trainable and Dtype are left out, in that
// order, until the names fit whole; names that still do not fit are cut
// with "...". Footer lines wrap at word boundaries.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#if !defined(_WIN32)
#include <sys/ioctl.h>
#include <unistd.h>
#endif

#include "typeflow/precision/policy.hpp"

namespace typeflow {

template <int N, class... Layers>
struct repeat;

namespace detail {
inline std::string with_thousands(std::size_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}
inline std::string human_bytes(std::size_t bytes) {
  char text[32];
  if (bytes < 1024)
    std::snprintf(text, sizeof text, "%zu B", bytes);
  else if (bytes >= (std::size_t{1} << 20))
    std::snprintf(text, sizeof text, "%.2f MB", bytes / 1048576.0);
  else
    std::snprintf(text, sizeof text, "%.2f KB", bytes / 1024.0);
  return text;
}
// "(None, 28, 28)": the batch axis first, unknown until a dataset is given.
inline std::string batched_shape(std::span<const int> dims) {
  std::string out = "(None";
  for (int d : dims) out += ", " + std::to_string(d);
  return out + ")";
}

namespace summary_table {

// One row of the table; depth counts the combinators above it.
struct row {
  int depth = 0;
  std::string label, shape, dtype, params, trainable, bytes;
  std::string connected;  // a graph node's inputs ("Connected to")
};

// A row's fields from a layer's constants: one function for every layer
// type, so that each add_rows instantiation holds only what is its own.
inline row row_of(int depth, std::span<const int> dims, std::string_view dtype, std::size_t params,
                  std::size_t trainable) {
  row r;
  r.depth = depth;
  r.shape = batched_shape(dims);
  r.dtype = std::string(dtype);
  r.params = with_thousands(params);
  r.trainable = with_thousands(trainable);
  return r;
}

// repeat<N, ...>: the copies and the block; anything else: no copies.
template <class Spec>
struct repeat_of {
  static constexpr int copies = 0;
  using block = void;
};
template <int N, class... Layers>
struct repeat_of<repeat<N, Layers...>> {
  static constexpr int copies = N;
  using block = typename repeat<N, Layers...>::block;
};

template <class Bound>
concept has_children = requires { typename Bound::children; };
template <class Bound>
concept is_graph_binding = requires { Bound::is_graph; };

// A combinator's type as a row shows it: whole when short, else "kind<...>"
// ("repeat<12, ...>"), since its children's rows follow.
inline std::string short_type_name(const std::string& name) {
  constexpr std::size_t longest = 30;
  const std::size_t open = name.find('<');
  if (name.size() <= longest || open == std::string::npos) return name;
  if (name.starts_with("repeat<")) {
    const std::size_t comma = name.find(',');
    if (comma != std::string::npos) return name.substr(0, comma) + ", ...>";
  }
  return name.substr(0, open) + "<...>";
}

// A leaf's name within its block: its parameters' full name without the
// parameter's own name and without the path above the block ("layers.3.",
// "blocks.0."), e.g. "layers.3.blocks.0.attn.qkv.kernel" -> "attn".
inline std::string leaf_name(const std::string& full, std::string_view own) {
  std::string prefix = full;
  if (full.size() > own.size() && full.ends_with(own) && full[full.size() - own.size() - 1] == '.')
    prefix = full.substr(0, full.size() - own.size() - 1);
  std::size_t start = 0;
  for (std::size_t at = prefix.find("blocks."); at != std::string::npos; at = prefix.find("blocks.", at + 1)) {
    std::size_t end = at + 7;
    while (end < prefix.size() && prefix[end] >= '0' && prefix[end] <= '9') ++end;
    if (end > at + 7 && end < prefix.size() && prefix[end] == '.' && (at == 0 || prefix[at - 1] == '.'))
      start = end + 1;
  }
  if (start == 0 && prefix.starts_with("layers.")) {
    const std::size_t dot = prefix.find('.', 7);
    if (dot != std::string::npos) start = dot + 1;
  }
  return prefix.substr(start);
}

template <class Bound>
void add_graph_rows(std::vector<row>& rows, int depth, bool frozen, const std::vector<std::string>& names,
                    std::size_t& cursor);

// Walks a bound layer and its children, adding their rows. names holds the
// full parameter names of the top-level layer in order; cursor is the next
// one this layer's parameters take.
template <class Bound, class Spec>
void add_rows(std::vector<row>& rows, int depth, bool frozen, const std::vector<std::string>& names,
              std::size_t& cursor, const std::string& suffix) {
  using params = typename Bound::params;
  row r = row_of(depth, Bound::output_shape::dims, Bound::compute_dtype::name, params::parameter_count,
                 frozen ? 0 : params::trainable_count);
  if constexpr (has_children<Bound>) {
    r.label = short_type_name(Spec::type_name()) + suffix;
    rows.push_back(std::move(r));
    const std::size_t start = cursor;
    if constexpr (repeat_of<Spec>::copies > 0) {
      // One copy shown; the cursor then passes over all N copies' parameters.
      add_rows<typename Bound::template child<0>, typename repeat_of<Spec>::block>(
          rows, depth + 1, frozen, names, cursor, " x" + std::to_string(repeat_of<Spec>::copies));
    } else {
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        (add_rows<typename Bound::template child<I>, typename Bound::template child_spec<I>>(rows, depth + 1, frozen,
                                                                                           names, cursor, ""),
         ...);
      }(std::make_index_sequence<Bound::n>{});
    }
    cursor = start + params::count;
  } else if constexpr (is_graph_binding<Bound>) {
    r.label = Spec::type_name() + suffix;
    rows.push_back(std::move(r));
    add_graph_rows<Bound>(rows, depth + 1, frozen, names, cursor);
  } else {
    if constexpr (params::count > 0) {
      const std::string_view own = std::tuple_element_t<0, typename params::tuple>::name;
      const std::string name = cursor < names.size() ? leaf_name(names[cursor], own) : std::string();
      r.label = (name.empty() ? "" : name + " ") + "(" + Spec::type_name() + ")" + suffix;
    } else {
      r.label = Spec::type_name() + suffix;
    }
    cursor += params::count;
    rows.push_back(std::move(r));
  }
}

// A graph's nodes, one row each with the nodes it reads ("Connected to"),
// a block's children under it. A node's row is named by the node; the rows
// inside a block by their parameters, as elsewhere.
template <class Bound>
void add_graph_rows(std::vector<row>& rows, int depth, bool frozen, const std::vector<std::string>& names,
                    std::size_t& cursor) {
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    (
        [&] {
          constexpr std::size_t k = K + 1;
          using node = typename Bound::template node_at<k>;
          using node_spec = typename Bound::template node_type<k>;
          // functional<>'s outputs<...> packs its outputs: no row of its own.
          if constexpr (is_pack_v<typename node_spec::layer>) return;
          const bool owns = Bound::shared_with[k] == static_cast<std::size_t>(-1);
          row r = row_of(depth, node::output_shape::dims, node::compute_dtype::name,
                         owns ? node::params::parameter_count : 0,
                         owns && !frozen ? node::params::trainable_count : 0);
          if constexpr (Bound::is_input_node[k]) {  // Keras's InputLayer, in its own dtype
            r.dtype = std::string(node::output_dtype::name);
            r.label = std::string(node_spec::name) + " (InputLayer)";
            rows.push_back(std::move(r));
            return;
          }
          r.label = std::string(node_spec::name) + " (" + short_type_name(node_spec::layer::type_name()) + ")";
          for (std::size_t j = 0; j < Bound::input_counts[k]; ++j)
            r.connected += (j ? ", " : "") + std::string(Bound::names::names[Bound::sources[k][j]]);
          rows.push_back(std::move(r));
          if (!owns) return;
          if constexpr (has_children<node>) {
            // The node's own names, from the node on: "block.dense.kernel" -> "dense.kernel".
            std::vector<std::string> own;
            const std::string mark = std::string(node_spec::name) + ".";
            for (std::size_t p = cursor; p < cursor + node::params::count && p < names.size(); ++p) {
              const std::size_t at = names[p].rfind(mark);
              own.push_back(at == std::string::npos ? names[p] : names[p].substr(at + mark.size()));
            }
            std::size_t inner = 0;
            [&]<std::size_t... C>(std::index_sequence<C...>) {
              (add_rows<typename node::template child<C>, typename node::template child_spec<C>>(rows, depth + 1, frozen,
                                                                                                 own, inner, ""),
               ...);
            }(std::make_index_sequence<node::n>{});
          }
          cursor += node::params::count;
        }(),
        ...);
  }(std::make_index_sequence<Bound::count>{});
}

// The full names of top-level layer I's parameters, in order.
template <class Layer>
std::vector<std::string> parameter_names(std::size_t i) {
  std::vector<std::string> names;
  const std::string prefix = Layer::absolute_names ? std::string() : "layers." + std::to_string(i) + ".";
  [&]<std::size_t... P>(std::index_sequence<P...>) {
    (names.push_back(prefix + std::string(std::tuple_element_t<P, typename Layer::params::tuple>::name)), ...);
  }(std::make_index_sequence<Layer::params::count>{});
  return names;
}

// The rows of top-level layer I of Net: the layer, then its children.
template <class Net, std::size_t I>
void add_layer_rows(std::vector<row>& rows, std::size_t& activation_bytes) {
  using layer = typename Net::template layer<I>;
  const bool shared = I > 0 && Net::output_aliases_input[I];
  const std::size_t bytes = Net::output_sizes[I] * Net::output_element_bytes[I];
  if (!shared) activation_bytes += bytes;
  // Trained: all but statistics, and nothing of a frozen<...> layer.
  const std::size_t trained = Net::trainable[I] ? layer::params::trainable_count : 0;
  row r = row_of(0, layer::output_shape::dims, I == 0 ? Net::input_dtype::name : layer::compute_dtype::name,
                 layer::params::parameter_count, trained);
  r.label = I == 0 ? "input"
                   : "layers." + std::to_string(I) + " (" + short_type_name(Net::template layer_type_name<I>()) + ")";
  r.bytes = shared ? "shared" : human_bytes(bytes);
  rows.push_back(std::move(r));
  if constexpr (I > 0 && is_graph_binding<layer>) {
    const std::vector<std::string> names = parameter_names<layer>(I);
    std::size_t cursor = 0;
    // functional<>: the nodes are the model's rows; a graph inside a
    // sequential shows them under its own row.
    const bool whole = layer::absolute_names;
    if (whole) rows.pop_back();
    if (whole && layer::names::named_inputs) rows.pop_back();  // the packed inputs: each input node has its row
    add_graph_rows<layer>(rows, whole ? 0 : 1, !Net::trainable[I], names, cursor);
  } else if constexpr (I > 0 && has_children<layer>) {
    const std::vector<std::string> names = parameter_names<layer>(I);
    std::size_t cursor = 0;
    using spec = typename Net::template spec<I>;
    if constexpr (repeat_of<spec>::copies > 0) {
      add_rows<typename layer::template child<0>, typename repeat_of<spec>::block>(
          rows, 1, !Net::trainable[I], names, cursor, " x" + std::to_string(repeat_of<spec>::copies));
    } else {
      [&]<std::size_t... C>(std::index_sequence<C...>) {
        (add_rows<typename layer::template child<C>, typename layer::template child_spec<C>>(
             rows, 1, !Net::trainable[I], names, cursor, ""),
         ...);
      }(std::make_index_sequence<layer::n>{});
    }
  }
}

// "abc..." when text is wider than width (at least 4).
inline std::string cut(const std::string& text, std::size_t width) {
  if (text.size() <= width) return text;
  return width <= 3 ? text.substr(0, width) : text.substr(0, width - 3) + "...";
}

// Words of text on lines of at most width characters (0: one line).
inline std::string wrapped(const std::string& text, std::size_t width) {
  if (width == 0 || text.size() <= width) return text + "\n";
  std::string out, line;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(at, end - at);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = "  ";  // a continued line is indented
    }
    line += (line.empty() || line == "  " ? "" : " ") + word;
    at = end + 1;
  }
  return out + line + "\n";
}

// The table laid out within line_length (0: no limit).
inline std::string layout(const std::vector<row>& rows, std::size_t line_length) {
  constexpr std::size_t columns = 7;
  const std::array<const char*, columns> headers{"Layer (type)", "Output Shape", "Dtype",       "Param #",
                                                 "Trainable",    "Output bytes", "Connected to"};
  const std::array<std::size_t, columns> keras_widths{27, 21, 10, 12, 12, 12, 20};
  const auto cell = [](const row& r, std::size_t c) -> std::string {
    switch (c) {
      case 0: return std::string(2 * static_cast<std::size_t>(r.depth), ' ') + r.label;
      case 1: return r.shape;
      case 2: return r.dtype;
      case 3: return r.params;
      case 4: return r.trainable;
      case 5: return r.bytes;
      default: return r.connected;
    }
  };
  std::array<std::size_t, columns> fitted{};
  for (std::size_t c = 0; c < columns; ++c) {
    fitted[c] = std::string_view(headers[c]).size();
    for (const row& r : rows) fitted[c] = std::max(fitted[c], cell(r, c).size());
  }
  // "Connected to" only for a graph's rows.
  const bool graph = std::any_of(rows.begin(), rows.end(), [](const row& r) { return !r.connected.empty(); });
  std::array<bool, columns> shown{true, true, true, true, true, true, graph};
  std::array<std::size_t, columns> width{};
  // " a b c": a leading space before each column.
  const auto total = [&] {
    std::size_t sum = 0;
    for (std::size_t c = 0; c < columns; ++c)
      if (shown[c]) sum += 1 + width[c];
    return sum;
  };
  for (std::size_t c = 0; c < columns; ++c) width[c] = shown[c] ? std::max(fitted[c], keras_widths[c]) : 0;
  if (line_length > 0 && total() > line_length) {
    for (std::size_t c = 0; c < columns; ++c) width[c] = shown[c] ? fitted[c] : 0;
    // Whole names before optional columns: Output bytes, Trainable, Dtype
    // go in turn until the names fit; if they never do, they are cut.
    for (std::size_t drop : {columns, std::size_t{5}, std::size_t{4}, std::size_t{2}}) {
      if (drop < columns) shown[drop] = false;
      if (total() <= line_length) break;
    }
    if (total() > line_length) {
      const std::size_t others = total() - width[0];
      width[0] = std::max<std::size_t>(line_length > others ? line_length - others : 0, 4);
    }
  }
  const std::size_t line = total();
  std::string out;
  const auto add_row = [&](auto value_of) {
    std::string text;
    std::size_t last = 0;
    for (std::size_t c = 0; c < columns; ++c)
      if (shown[c]) last = c;
    for (std::size_t c = 0; c < columns; ++c) {
      if (!shown[c]) continue;
      std::string value = cut(value_of(c), width[c]);
      if (c != last) value.resize(width[c], ' ');
      text += " " + value;
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + "\n";
  };
  out += std::string(line, '_') + "\n";
  add_row([&](std::size_t c) { return std::string(headers[c]); });
  out += std::string(line, '=') + "\n";
  for (const row& r : rows) add_row([&](std::size_t c) { return cell(r, c); });
  out += std::string(line, '=') + "\n";
  return out;
}

}  // namespace summary_table

// The width a summary printed to out may take: the terminal's columns, else
// $COLUMNS, else 0 (no limit).
inline std::size_t summary_line_length([[maybe_unused]] std::FILE* out) {
#if defined(TIOCGWINSZ)
  winsize size{};
  const int descriptor = ::fileno(out);
  if (descriptor >= 0 && ::isatty(descriptor) && ::ioctl(descriptor, TIOCGWINSZ, &size) == 0 && size.ws_col > 0)
    return size.ws_col;
#endif
  if (const char* columns = std::getenv("COLUMNS")) {
    const long value = std::strtol(columns, nullptr, 10);
    if (value > 0) return static_cast<std::size_t>(value);
  }
  return 0;
}
}  // namespace detail

// The summary as text, each line at most line_length characters (0: no limit).
// Each layer's compute dtype (what its arithmetic is rounded to: the
// policy's, a layer's own override, float32 for layers that know only
// float32) and the bytes of its stored output per sample: 2 an element where
// a 16-bit policy stores it in 16 bits, "shared" where the output is the
// input's buffer (flatten, a relu fused into its dense).
template <class Net>
std::string summary_text(std::size_t line_length = 0) {
  std::vector<detail::summary_table::row> rows;
  std::size_t activation_bytes = 0;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (detail::summary_table::add_layer_rows<Net, I>(rows, activation_bytes), ...);
  }(std::make_index_sequence<Net::layer_count>{});
  const std::string table = detail::summary_table::layout(rows, line_length);
  // Statistics (batch_norm's moving mean and variance) and the parameters
  // of frozen<...> layers are parameters the optimizer never trains.
  const std::size_t total = Net::parameter_count;
  const std::size_t trainable = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return (std::size_t{0} + ... + (Net::trainable[I] ? Net::template layer<I>::params::trainable_count : 0));
  }(std::make_index_sequence<Net::layer_count>{});
  const std::size_t rule_length = table.find('\n');
  using detail::summary_table::wrapped;
  constexpr bool functional_net = [] {
    if constexpr (Net::layer_count == 2 && detail::summary_table::is_graph_binding<typename Net::template layer<1>>)
      return Net::template layer<1>::absolute_names;
    else
      return false;
  }();
  std::string out = wrapped(std::string("Model: \"") + (functional_net ? "functional" : "sequential") +
                                "\"  (policy: " + policy_name<typename Net::policy>() + ")",
                            line_length);
  out += table;
  out += wrapped("Total params: " + detail::with_thousands(total) + " (" +
                     detail::human_bytes(total * sizeof(float)) + ", float32)",
                 line_length);
  out += wrapped("Trainable params: " + detail::with_thousands(trainable), line_length);
  out += wrapped("Non-trainable params: " + detail::with_thousands(total - trainable), line_length);
  out += wrapped("Layer outputs: " + detail::human_bytes(activation_bytes) +
                     " per sample (times the batch in training; a layer's own workspace comes on top)",
                 line_length);
  out += std::string(rule_length, '_') + "\n";
  return out;
}

// Prints the summary to out, within line_length columns (0: the terminal's
// width when out is one, else $COLUMNS, else no limit).
template <class Net>
void print_summary(std::FILE* out, std::size_t line_length = 0) {
  const std::string text = summary_text<Net>(line_length > 0 ? line_length : detail::summary_line_length(out));
  std::fwrite(text.data(), 1, text.size(), out);
}

}  // namespace typeflow

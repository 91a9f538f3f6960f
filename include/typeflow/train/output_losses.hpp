// A loss and metrics per output, for a network with several outputs
// (functional<..., outputs<"priority", "department">>), with Keras's
// semantics and names:
//
//   model.compile(tf::optimizers::adam{},
//                 tf::on_output<"priority">(tf::losses::mean_squared_error{}, /*weight=*/1.0),
//                 tf::on_output<"department">(tf::losses::sparse_categorical_crossentropy{.from_logits = true}, 0.2),
//                 tf::on_output<"department">(tf::metrics::accuracy{}));
//
// The loss is the weighted sum of the outputs' losses (an output without a
// loss is not trained through); fit logs it as "loss", each output's own
// (unweighted) mean as "priority_loss", and a metric given for an output as
// "department_accuracy". A plain loss or metric given to such a model is
// given to every output, as Keras does.
//
// The network's outputs leave packed, one (B, sum of sizes) row per sample
// (model/network_io.hpp); the labels come as a record of named parts
// (data/record.hpp), packed the same way in the batch. Which label part
// feeds which output is settled by name when fit, evaluate or
// train_on_batch first sees the batch type (bind_labels), so the record's
// parts may come in any order; each output's slice is gathered into a
// contiguous block, given to its loss, and its gradient put back.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "typeflow/core/fixed_string.hpp"
#include "typeflow/data/record.hpp"
#include "typeflow/layers/merge_functors.hpp"
#include "typeflow/losses/output_rows.hpp"
#include "typeflow/model/network_io.hpp"
#include "typeflow/train/compile_holders.hpp"

namespace typeflow {

// A loss (with its weight) or a metric for the output named Output.
template <fixed_string Output, class T>
struct on_output_t {
  static constexpr bool is_on_output = true;
  static constexpr std::string_view output = Output.view();
  using value_type = T;
  T value;
  double weight = 1.0;  // a loss's weight in the total; metrics have none
};
template <fixed_string Output, class T>
on_output_t<Output, T> on_output(T value, double weight = 1.0) {
  return {std::move(value), weight};
}
template <class T>
inline constexpr bool is_on_output_v = requires { T::is_on_output; };

// A check whose name carries the output the compile() argument names:
// "'compile_check<on_output_t<"prio"...>, false>::passed' evaluates to false".
template <class Where, bool Ok>
struct compile_check {
  static constexpr bool passed = Ok;
};

namespace detail {

// Where each output's labels lie in a batch's packed label row, settled by
// name from the label record's type.
struct label_layout {
  struct part {
    bool present = false;
    std::size_t offset = 0, size = 0;
    bool int32 = false;
  };
  std::vector<part> parts;  // per output
  std::size_t width = 0;    // label values per sample
};

// One output's slice of the packed output and labels, gathered into
// contiguous blocks, per thread (the replicas of mirrored<N> run their
// losses at once).
struct output_slices {
  std::vector<float> out, d_out, row_loss, targets;
  std::vector<std::int32_t> ids;

  static output_slices& for_this_thread() {
    thread_local output_slices slices;
    return slices;
  }
  // rows: samples; width: the packed row's values; the output's at offset, size.
  void gather(const float* packed, std::size_t rows, std::size_t width, std::size_t offset, std::size_t size) {
    out.resize(rows * size);
    for (std::size_t r = 0; r < rows; ++r) std::copy_n(packed + r * width + offset, size, out.data() + r * size);
  }
  void gather_labels(const float* labels, std::size_t rows, const label_layout& layout, const label_layout::part& p) {
    if (p.int32) {
      ids.resize(rows * p.size);
      for (std::size_t r = 0; r < rows; ++r)
        std::memcpy(ids.data() + r * p.size, labels + r * layout.width + p.offset, p.size * sizeof(std::int32_t));
    } else {
      targets.resize(rows * p.size);
      for (std::size_t r = 0; r < rows; ++r)
        std::copy_n(labels + r * layout.width + p.offset, p.size, targets.data() + r * p.size);
    }
  }
};

// The outputs' losses as one loss over the packed output.
struct output_losses final : loss_base {
  struct entry {
    std::unique_ptr<loss_base> loss;
    double weight = 1.0;
    std::size_t output = 0;
  };
  std::vector<entry> entries;
  std::vector<io_part> outputs;  // the network's, in order
  std::size_t width = 0;         // the packed output's values per sample
  std::shared_ptr<label_layout> layout = std::make_shared<label_layout>();
  std::vector<bool> needed;  // per output: a loss or a metric reads its labels
  std::vector<int> forms;    // per output: its loss's label_form, or -1
  std::string description;

  losses::label_form form() const override { return losses::label_form::dense; }
  std::string_view name() const override { return description; }
  void sparse(const float*, const std::int32_t*, std::ptrdiff_t, int, std::ptrdiff_t, float*, float*) const override {
    throw std::logic_error("typeflow: a model with several outputs takes its labels as a record of named parts");
  }
  // out, d_out: (rows, width) packed; targets: (rows, label width) packed;
  // row_loss: each sample's weighted sum of its outputs' losses.
  void dense(const float* out, const float* labels, std::ptrdiff_t rows, int, std::ptrdiff_t valid, float* d_out,
             float* row_loss) const override {
    const auto n = static_cast<std::size_t>(rows);
    std::fill(row_loss, row_loss + n, 0.f);
    std::fill(d_out, d_out + n * width, 0.f);  // outputs without a loss get none
    thread_local std::vector<float> blocks;    // the replicas of mirrored<N> run their losses at once
    blocks.resize(block_floats(n));
    const auto each = [](std::size_t count, const auto& f) {
      for (std::size_t i = 0; i < count; ++i) f(i);
    };
    const auto run_loss = [&](std::size_t k, const float* o, const float* l, float* d, float* r, std::ptrdiff_t loss_rows,
                              int classes, std::ptrdiff_t valid_rows) {
      if (layout->parts[entries[k].output].int32)
        entries[k].loss->sparse(o, reinterpret_cast<const std::int32_t*>(l), loss_rows, classes, valid_rows, d, r);
      else
        entries[k].loss->dense(o, l, loss_rows, classes, valid_rows, d, r);
    };
    per_output(out, labels, d_out, row_loss, n, static_cast<std::size_t>(valid), blocks.data(), each, run_loss);
  }

  // The floats per_output's blocks take for `samples` samples: an output's
  // columns, labels and gradient, and its rows' losses.
  std::size_t block_floats(std::size_t samples) const {
    std::size_t most_rows = 0;
    for (const io_part& o : outputs) most_rows = std::max(most_rows, o.size / static_cast<std::size_t>(o.classes));
    return samples * (3 * widest_output() + most_rows);
  }
  std::size_t widest_output() const {
    std::size_t widest = 0;
    for (const io_part& o : outputs) widest = std::max(widest, o.size);
    return widest;
  }

  // The steps, written once for both devices (train/cuda_output_losses.hpp
  // runs them on a GPU); d_out and row_loss start at zero. For each output
  // with a loss: its columns of the output and of the labels gathered into
  // contiguous blocks (merge_fn::place, the concatenation's copy; a class-id
  // part's int32 bits travel as they are), its loss on them, its gradient
  // times its weight put back into its columns, and each sample's loss
  // gains the weighted mean of its rows. each(n, f) calls f(i) for i < n;
  // run_loss(k, out, labels, d_out, row_loss, rows, classes, valid_rows)
  // runs entry k's loss; `blocks` holds block_floats(samples) floats.
  template <class Each, class RunLoss>
  void per_output(const float* out, const float* labels, float* d_out, float* row_loss, std::size_t samples,
                  std::size_t valid, float* blocks, Each&& each, RunLoss&& run_loss) const {
    using namespace detail::merge_fn;
    const std::size_t stride = samples * widest_output();
    float* out_block = blocks;
    float* label_block = out_block + stride;
    float* gradient_block = label_block + stride;
    float* loss_block = gradient_block + stride;
    for (std::size_t k = 0; k < entries.size(); ++k) {
      const io_part& o = outputs[entries[k].output];
      const label_layout::part& p = layout->parts[entries[k].output];
      const std::size_t per_sample = o.size / static_cast<std::size_t>(o.classes);
      const float weight = static_cast<float>(entries[k].weight);
      each(samples * o.size, place{out, out_block, o.size, width, o.offset, true});
      each(samples * p.size, place{labels, label_block, p.size, layout->width, p.offset, true});
      run_loss(k, out_block, label_block, gradient_block, loss_block,
               static_cast<std::ptrdiff_t>(samples * per_sample), o.classes,
               static_cast<std::ptrdiff_t>(valid * per_sample));
      each(samples * o.size, axpby{gradient_block, nullptr, gradient_block, weight, 0.f});
      each(samples * o.size, place{gradient_block, d_out, o.size, width, o.offset, false});
      each(samples, losses::add_weighted_row_mean{loss_block, row_loss, per_sample, weight});
    }
  }
};

// A metric of one output, logged as "<output>_<metric>".
struct output_metric final : metric_base {
  std::unique_ptr<metric_base> metric;
  io_part output;
  std::size_t index = 0, width = 0;
  std::shared_ptr<const label_layout> layout;
  std::string logged_name;

  output_metric(std::unique_ptr<metric_base> m, io_part o, std::size_t i, std::size_t w,
                std::shared_ptr<const label_layout> l)
      : metric(std::move(m)), output(o), index(i), width(w), layout(std::move(l)),
        logged_name(std::string(o.name) + "_" + std::string(metric->name())) {}
  std::string_view name() const override { return logged_name; }
  void reset() override { metric->reset(); }
  double result() const override { return metric->result(); }
  std::vector<double> state() const override { return metric->state(); }
  void restore(std::span<const double> state) override { metric->restore(state); }
  void update(const float*, const std::int32_t*, std::ptrdiff_t, int) override {
    throw std::logic_error("typeflow: a model with several outputs takes its labels as a record of named parts");
  }
  // valid: samples (the packed output has one row per sample).
  void update(const float* out, const float* labels, std::ptrdiff_t valid, int) override {
    const label_layout::part& p = layout->parts[index];
    if (!p.present) return;
    auto& s = output_slices::for_this_thread();
    const auto n = static_cast<std::size_t>(valid);
    const std::ptrdiff_t rows = valid * static_cast<std::ptrdiff_t>(output.size / static_cast<std::size_t>(output.classes));
    s.gather(out, n, width, output.offset, output.size);
    s.gather_labels(labels, n, *layout, p);
    if (p.int32)
      metric->update(s.out.data(), s.ids.data(), rows, output.classes);
    else
      metric->update(s.out.data(), s.targets.data(), rows, output.classes);
  }
};

// An output's own loss, unweighted, as a metric: "<output>_loss".
struct output_loss_metric final : metric_base {
  std::shared_ptr<const loss_base> loss;
  io_part output;
  std::size_t index = 0, width = 0;
  std::shared_ptr<const label_layout> layout;
  std::string logged_name;
  metrics::mean mean;

  output_loss_metric(std::shared_ptr<const loss_base> l, io_part o, std::size_t i, std::size_t w,
                     std::shared_ptr<const label_layout> lay)
      : loss(std::move(l)), output(o), index(i), width(w), layout(std::move(lay)),
        logged_name(std::string(o.name) + "_loss") {}
  std::string_view name() const override { return logged_name; }
  void reset() override { mean.reset(); }
  double result() const override { return mean.result(); }
  std::vector<double> state() const override {
    const auto s = mean.state();
    return {s[0], s[1]};
  }
  void restore(std::span<const double> state) override {
    if (state.size() == 2) mean.restore({state[0], state[1]});
  }
  void update(const float*, const std::int32_t*, std::ptrdiff_t, int) override {
    throw std::logic_error("typeflow: a model with several outputs takes its labels as a record of named parts");
  }
  void update(const float* out, const float* labels, std::ptrdiff_t valid, int) override {
    const label_layout::part& p = layout->parts[index];
    if (!p.present || valid == 0) return;
    auto& s = output_slices::for_this_thread();
    const auto n = static_cast<std::size_t>(valid);
    const std::size_t per_sample = output.size / static_cast<std::size_t>(output.classes);
    const auto rows = static_cast<std::ptrdiff_t>(n * per_sample);
    s.gather(out, n, width, output.offset, output.size);
    s.gather_labels(labels, n, *layout, p);
    s.d_out.resize(n * output.size);
    s.row_loss.resize(n * per_sample);
    if (p.int32)
      loss->sparse(s.out.data(), s.ids.data(), rows, output.classes, rows, s.d_out.data(), s.row_loss.data());
    else
      loss->dense(s.out.data(), s.targets.data(), rows, output.classes, rows, s.d_out.data(), s.row_loss.data());
    double sum = 0;
    for (std::ptrdiff_t r = 0; r < rows; ++r) sum += s.row_loss[static_cast<std::size_t>(r)];
    mean.update(sum / static_cast<double>(rows), static_cast<double>(n));
  }
};

// Settles which part of the label record Labels feeds each output that has
// a loss or a metric, by name; throws, naming both sides, when one is
// missing or does not fit its output and its loss's form.
template <class Labels>
void bind_labels(label_layout& layout, std::span<const io_part> outputs, const std::vector<bool>& needed,
                 const std::vector<int>& forms, const char* where) {
  static_assert(data::is_record_v<Labels>,
                "fit/evaluate: a model with several outputs takes labels as a record of named parts, one per "
                "output, e.g. data::parts(data::named<\"class\">(label), data::named<\"ink\">(ink))");
  std::string have;
  for (std::size_t j = 0; j < Labels::count; ++j) have += (j ? ", " : "") + std::string(Labels::names[j]);
  layout.width = Labels::size;
  layout.parts.assign(outputs.size(), {});
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    const io_part& o = outputs[k];
    const std::size_t j = Labels::index_of(o.name);
    if (j == Labels::count) {
      if (needed[k])
        throw std::invalid_argument(std::string(where) + ": the output \"" + std::string(o.name) +
                                    "\" has a loss or metric, but the labels have no part of that name (they have " +
                                    have + ")");
      continue;
    }
    const std::size_t rows = o.size / static_cast<std::size_t>(o.classes);
    const bool sparse_fits = Labels::int32[j] && Labels::sizes[j] == rows;
    const bool dense_fits = !Labels::int32[j] && Labels::sizes[j] == o.size;
    const bool wants_sparse = forms[k] == static_cast<int>(losses::label_form::sparse);
    const bool wants_dense = forms[k] == static_cast<int>(losses::label_form::dense);
    if ((wants_sparse && !sparse_fits) || (wants_dense && !dense_fits) || (!sparse_fits && !dense_fits))
      throw std::invalid_argument(
          std::string(where) + ": the labels' part \"" + std::string(o.name) + "\" holds " +
          std::to_string(Labels::sizes[j]) + (Labels::int32[j] ? " int32" : " float") + " values per sample; output \"" +
          std::string(o.name) + "\" (" + std::to_string(o.size) + " values, " + std::to_string(o.classes) +
          " on its last axis) takes " +
          (wants_dense ? "" : std::to_string(rows) + " int32 class ids (a sparse loss)" + (wants_sparse ? "" : " or ")) +
          (wants_sparse ? "" : std::to_string(o.size) + " float targets (a dense loss)"));
    layout.parts[k] = {true, Labels::offsets[j], Labels::sizes[j], Labels::int32[j]};
  }
}

}  // namespace detail

}  // namespace typeflow

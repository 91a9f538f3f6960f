// training_state<Net>: what a model keeps about its training whatever the
// device: what compile() was given (optimizer, loss, metrics behind their
// holders), the update counter, the epoch counter for shuffling, the loss
// and metric means and the names they are logged under. The checks a
// dataset must pass before fit, evaluate or predict run are here too, so
// that model<..., cpu> and model<..., cuda> do not write them twice (fit's
// loop, over this state, is train/fit_loop.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "typeflow/core/dtype.hpp"
#include "typeflow/core/host_tensor.hpp"
#include "typeflow/core/shape.hpp"
#include "typeflow/data/any_dataset.hpp"
#include "typeflow/data/rebatch.hpp"
#include "typeflow/data/example.hpp"
#include "typeflow/losses/losses.hpp"
#include "typeflow/metrics/metrics.hpp"
#include "typeflow/optimizers/optimizers.hpp"
#include "typeflow/callbacks/callback.hpp"
#include "typeflow/train/compile_holders.hpp"
#include "typeflow/train/fit_snapshot.hpp"
#include "typeflow/callbacks/history.hpp"
#include "typeflow/train/non_finite.hpp"
#include "typeflow/train/output_losses.hpp"

namespace typeflow {

// fit's options, Keras's names. Element is the training batch type, so that
// validation data is any dataset of the same batches.
template <class Element>
struct fit_options {
  int epochs = 1;
  // Evaluated after every epoch; batched at any size (data/rebatch.hpp's
  // any_batches: batched again at the training batch size, same samples).
  data::any_batches<Element> validation_data{};
  std::vector<callback*> callbacks{};  // not owned; called after the built-in ones
  int verbose = 1;                     // 0 silent, 1 progress bar (one line per epoch off a terminal), 2 one line per epoch
  int initial_epoch = 0;  // Keras's: the epoch (0-based) to start at; fit runs epochs initial_epoch .. epochs - 1
  // The machine's peak FLOP/s, the denominator of the "mfu" log (model FLOPs
  // utilisation): 0 lets model<..., cpu> measure it once (backend/cpu/peak_flops.hpp)
  // and leaves mfu out on a GPU; a negative value leaves mfu out.
  double peak_flops = 0;
  // Keras's: at most this many batches make an epoch (each epoch opens the
  // dataset again, so an endless one, repeat(), gives each epoch its own
  // order); -1: until the dataset ends.
  std::int64_t steps_per_epoch = -1;
  // Keras's: at most this many batches of validation_data are evaluated; -1: all.
  std::int64_t validation_steps = -1;
  // Keras's: class id -> the weight of its rows' loss while training (a
  // class not named weighs 1); train/row_weights.hpp.
  std::map<int, float> class_weight{};
  // Keras's: the last fraction of the training samples (0 < fraction < 1),
  // before any shuffling, is evaluated after every epoch instead of trained
  // on; validation_data, when given, overrides it (train/validation_split.hpp).
  double validation_split = 0;
};

// fit's options for a dataset, written apart from the call:
//   tf::fit_options_for<decltype(train)> options{.epochs = 3, .validation_split = 0.2};
// A misspelt or ill-typed option is then the compiler's error naming it
// ("has no non-static data member named 'validation_splt'"); inside fit's
// call, C++ compilers only say that the braces do not convert to fit_options.
template <data::batched_dataset Dataset>
using fit_options_for = fit_options<typename Dataset::element_type>;

// The training FLOPs of one step of Batch samples: the network's forward
// FLOPs (a multiply-add counts two) three times over, since backward computes
// the gradients of both a layer's input and its weights (the usual
// 6 x parameters x tokens of a transformer). A recomputed block's second
// forward is not counted: MFU measures the model's work, not the machine's.
template <class Net, int Batch>
inline constexpr double training_flops_per_step = 3.0 * static_cast<double>(Net::flops_per_sample) * Batch;

// What evaluate returns: "loss" and each metric's name, with its value.
using evaluation = std::map<std::string, double, std::less<>>;
// What predict returns for a network with several outputs: each output's
// values with their shape, (samples, its shape) row-major, by the output's name.
using predictions = std::map<std::string, host_tensor, std::less<>>;

template <class Net>
class training_state {
 public:
  using output_shape_type = typename Net::output_shape_type;
  static constexpr int classes = output_shape_type::rank >= 1 ? output_shape_type::template dim<-1> : 1;
  static constexpr std::size_t rows_per_sample = output_shape_type::size / classes;
  // Floats from one output row to the next on the device: `classes`, or
  // wider where the plan pads them (a GPU's tied_logits: contract/layer.hpp).
  static constexpr int row_stride = Net::output_row_stride;
  static constexpr bool has_regularizers = Net::has_regularizers;
  static constexpr int max_slots = 8;

  using io = network_io<Net>;

  // Keeps the optimizer, loss and metrics; the update counter starts again.
  // With several outputs, the loss and each metric go to every output.
  template <optimizers::optimizer Optimizer, losses::loss Loss, detail::metric... Metrics>
    requires io::packed_outputs
  void compile(Optimizer optimizer_given, Loss loss_given, Metrics... metrics_given) {
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      compile(std::move(optimizer_given), on_output<output_name<J>>(loss_given)..., std::move(metrics_given)...);
    }(std::make_index_sequence<io::output_count>{});
  }

  // compile(optimizer, on_output<"name">(loss, weight)..., on_output<"name">(metric)..., metric...):
  // a loss per output (train/output_losses.hpp); a plain metric goes to
  // every output. On a one-output network the names must be its output's
  // and the plain loss and metrics are kept.
  template <optimizers::optimizer Optimizer, class First, class... Rest>
    requires is_on_output_v<First>
  void compile(Optimizer optimizer_given, First first, Rest... rest) {
    static_assert((check_output_argument<First>() && ... && check_output_argument<Rest>()));
    constexpr std::size_t loss_count = (std::size_t{is_output_loss<First>()} + ... + std::size_t{is_output_loss<Rest>()});
    static_assert(loss_count >= 1, "compile: give a loss for at least one output: on_output<\"name\">(loss, weight)");
    static_assert(no_output_with_two_losses<First, Rest...>(),
                  "compile: two losses name one output; give each output at most one loss");
    if constexpr (!io::packed_outputs) {
      static_assert(loss_count == 1, "compile: the network has one output, so it takes one loss");
      const auto plain = [](const auto& a) {
        using A = std::decay_t<decltype(a)>;
        if constexpr (is_on_output_v<A>) return a.value;
        else return a;
      };
      if (!(first.weight == 1.0))
        throw std::invalid_argument("compile: a loss weight on a network with one output; its loss is the output's");
      compile(std::move(optimizer_given), plain(first), plain(rest)...);
    } else {
      optimizer_given.validate();
      auto combined = std::make_unique<detail::output_losses>();
      combined->outputs.assign(io::outputs.begin(), io::outputs.end());
      combined->width = output_shape_type::size;
      combined->needed.assign(io::output_count, false);
      combined->forms.assign(io::output_count, -1);
      std::vector<std::unique_ptr<detail::metric_base>> loss_metrics, given_metrics;
      const auto add = [&](auto argument) {
        using A = decltype(argument);
        if constexpr (is_on_output_v<A>) {
          constexpr std::size_t k = output_index<Net>(A::output);
          using V = typename A::value_type;
          if constexpr (k < io::output_count) {  // else refused above (check_output_argument)
            combined->needed[k] = true;
            if constexpr (losses::loss<V>) {
              static_assert(compile_check<A, io::outputs[k].classes >= V::min_classes>::passed,
                            "compile: this loss needs at least two classes on its output's last axis");
              combined->entries.push_back({std::make_unique<detail::loss_holder<V>>(argument.value), argument.weight, k});
              combined->forms[k] = static_cast<int>(V::labels);
              combined->description += (combined->description.empty() ? "" : ", ") + std::string(A::output) + ": " +
                                       std::string(V::name) +
                                       (argument.weight != 1.0 ? " x " + std::to_string(argument.weight) : "");
              loss_metrics.push_back(std::make_unique<detail::output_loss_metric>(
                  std::make_shared<detail::loss_holder<V>>(argument.value), io::outputs[k], k, combined->width,
                  combined->layout));
            } else {
              given_metrics.push_back(std::make_unique<detail::output_metric>(
                  std::make_unique<detail::metric_holder<V>>(argument.value), io::outputs[k], k, combined->width,
                  combined->layout));
            }
          }
        } else {
          [&]<std::size_t... J>(std::index_sequence<J...>) {
            ((combined->needed[J] = true,
              given_metrics.push_back(std::make_unique<detail::output_metric>(
                  std::make_unique<detail::metric_holder<A>>(argument), io::outputs[J], J, combined->width,
                  combined->layout))),
             ...);
          }(std::make_index_sequence<io::output_count>{});
        }
      };
      add(std::move(first));
      (add(std::move(rest)), ...);
      // Keras's order: each output's loss, in output order, then the metrics.
      std::ranges::stable_sort(loss_metrics, {}, [](const auto& m) {
        return static_cast<const detail::output_loss_metric&>(*m).index;
      });
      optimizer = std::make_unique<detail::optimizer_holder<Optimizer>>(std::move(optimizer_given));
      per_output = combined.get();
      loss = std::move(combined);
      metrics = std::move(loss_metrics);
      for (auto& m : given_metrics) metrics.push_back(std::move(m));
      after_compile();
    }
  }

  template <optimizers::optimizer Optimizer, losses::loss Loss, detail::metric... Metrics>
    requires(!io::packed_outputs)
  void compile(Optimizer optimizer_given, Loss loss_given, Metrics... metrics_given) {
    static_assert(output_shape_type::rank >= 1,
                  "compile: the model's output has no axis for the loss to read; end the network "
                  "with a layer that has a feature axis, e.g. dense<1>");
    static_assert(classes >= Loss::min_classes,
                  "compile: this loss needs at least two classes on the output's last axis "
                  "(a single unit cannot hold a probability distribution)");
    optimizer_given.validate();
    optimizer = std::make_unique<detail::optimizer_holder<Optimizer>>(std::move(optimizer_given));
    loss = std::make_unique<detail::loss_holder<Loss>>(std::move(loss_given));
    per_output = nullptr;
    metrics.clear();
    (metrics.push_back(std::make_unique<detail::metric_holder<Metrics>>(std::move(metrics_given))), ...);
    after_compile();
  }

  // The optimizer compile() was given, as compile() keeps it: the one copy
  // that both the update and set_learning_rate act on (an engine that runs
  // the update elsewhere, as the GPU's, reads it from here).
  template <class Optimizer>
  const Optimizer& compiled_optimizer() const {
    return static_cast<const detail::optimizer_holder<Optimizer>&>(*optimizer).optimizer;
  }

  template <std::size_t J>
  static constexpr fixed_string<io::outputs[J].name.size() + 1> output_name = [] {
    char text[io::outputs[J].name.size() + 1]{};
    std::ranges::copy(io::outputs[J].name, text);
    return fixed_string<io::outputs[J].name.size() + 1>(text);
  }();

 private:
  template <class A>
  static constexpr bool is_output_loss() {
    if constexpr (is_on_output_v<A>)
      return losses::loss<typename A::value_type>;
    else
      return false;
  }
  template <class A>
  static constexpr bool check_output_argument() {
    if constexpr (is_on_output_v<A>) {
      static_assert(compile_check<A, (output_index<Net>(A::output) < io::output_count)>::passed,
                    "compile: on_output<\"name\"> names an output the network does not have (the network's "
                    "outputs are outputs<...>'s names, or its last node's)");
      static_assert(losses::loss<typename A::value_type> || detail::metric<typename A::value_type>,
                    "compile: on_output<\"name\">(x) takes a loss (with its weight) or a metric");
      return true;
    } else {
      static_assert(detail::metric<A>,
                    "compile: after the per-output losses come metrics, on_output<\"name\">(metric) or plain "
                    "(for every output)");
      return true;
    }
  }
  template <class... Args>
  static constexpr bool no_output_with_two_losses() {
    std::array<std::size_t, io::output_count> losses_at{};
    const auto count = [&]<class A>(std::type_identity<A>) {
      if constexpr (is_output_loss<A>()) {
        constexpr std::size_t k = output_index<Net>(A::output);
        if constexpr (k < io::output_count) ++losses_at[k];
      }
    };
    (count(std::type_identity<Args>{}), ...);
    for (std::size_t n : losses_at)
      if (n > 1) return false;
    return true;
  }
  void after_compile() {
    slots = optimizer->slots();
    ema_in_weights = false;
    if (slots > max_slots) throw std::logic_error("compile: the optimizer asks for more state slots than a model holds");
    iterations = 0;
  }

 public:

  void require_compiled(const char* where) const {
    if (!optimizer || !loss)
      throw std::logic_error(std::string(where) + ": call compile(optimizer, loss, metrics...) first");
  }

  template <class Batch>
  static constexpr void check_batch_type() {
    using features = typename Batch::features_type;
    if constexpr (io::named_inputs)
      check_named_features<features>();
    else
      check_plain_features<features>();
  }
  // A record of the named inputs' parts, in the network's order (or, for
  // one input, that input's values as they are).
  template <class Features>
  static constexpr void check_named_features() {
    if constexpr (data::is_record_v<Features>) {
      constexpr bool same = [] {
        if (Features::count != io::input_count) return false;
        for (std::size_t j = 0; j < io::input_count; ++j)
          if (Features::names[j] != io::inputs[j].name || Features::sizes[j] != io::inputs[j].size ||
              Features::int32[j] != io::inputs[j].int32)
            return false;
        return true;
      }();
      static_assert(compile_check<Features, same>::passed,
                    "fit/evaluate/predict: the dataset's features must be a record of the network's inputs, in its "
                    "order, each of its size and type (float or int32): compare the record's parts with the input "
                    "nodes");
    } else {
      static_assert(compile_check<Features, io::input_count == 1 && Features::size == io::inputs[0].size &&
                                                       std::is_same_v<typename Features::value_type, std::int32_t> ==
                                                           io::inputs[0].int32>::passed,
                    "fit/evaluate/predict: a network with several named inputs takes features as a record of "
                    "named parts, e.g. data::parts(data::named<\"image\">(image), data::named<\"ink\">(ink))");
    }
  }
  template <class features>
  static constexpr void check_plain_features() {
    static_assert(!data::is_record_v<features>,
                  "fit/evaluate/predict: the dataset's features are a record of named parts, but the network "
                  "has one unnamed input; name its inputs as nodes of a functional<>, or give a tensor_value");
    static_assert(std::is_same_v<typename features::shape_type, typename Net::input_shape_type>,
                  "fit/evaluate/predict: the dataset's feature shape differs from the model's input "
                  "shape (compare the dataset's element type with the model's input<...>)");
    static_assert(std::is_same_v<typename features::value_type, typename Net::input_dtype::value_type>,
                  "fit/evaluate/predict: the dataset's features have another element type than the "
                  "model's input; e.g. map(scale(1.f / 255)) turns uint8 pixels into float32");
  }

  template <class Batch>
  void check_label_form(const char* where) const {
    using label = typename Batch::label_type;
    if constexpr (io::packed_outputs) {
      detail::bind_labels<label>(*per_output->layout, io::outputs, per_output->needed, per_output->forms, where);
      return;
    } else {
      check_single_label_form<label>(where);
    }
  }
  template <class label>
  void check_single_label_form(const char* where) const {
    constexpr bool sparse = std::is_same_v<typename label::shape_type, drop_last_t<output_shape_type>> &&
                            std::is_same_v<typename label::value_type, std::int32_t>;
    constexpr bool dense = std::is_same_v<typename label::shape_type, output_shape_type> &&
                           std::is_same_v<typename label::value_type, float>;
    static_assert(sparse || dense,
                  "fit/evaluate: the dataset's labels can match the model's output in neither form a "
                  "loss takes: int32 class ids shaped like the output without its last axis (sparse), "
                  "or float targets shaped exactly like the output (dense)");
    const auto wanted = loss->form();
    if ((wanted == losses::label_form::sparse) != sparse)
      throw std::invalid_argument(std::string(where) + ": the loss " + std::string(loss->name()) + " takes " +
                                  (wanted == losses::label_form::sparse ? "int32 class ids" : "dense float targets") +
                                  ", but the dataset's labels are " + (sparse ? "class ids" : "dense targets"));
  }

  // Before fit, evaluate or train_on_batch (`where`): the batches fit the
  // model's input, compile() ran, and the labels are what the loss takes.
  template <class Batch>
  void check_labelled(const char* where) const {
    check_batch_type<Batch>();
    require_compiled(where);
    check_label_form<Batch>(where);
  }

  // A batch train_on_batch can step on: at least one sample (a partial
  // batch trains, train/training_step.hpp).
  template <class Batch>
  static void check_trainable(const Batch& batch) {
    if (batch.valid <= 0)
      throw std::invalid_argument("train_on_batch: the batch holds " + std::to_string(batch.valid) + " of " +
                                  std::to_string(Batch::size) + " samples; a step needs at least one");
  }

  void reset_metrics() {
    loss_mean.reset();
    regularization_mean.reset();
    for (auto& m : metrics) m->reset();
  }

  // Names are string_views into the metrics' static names, so logs never own.
  void fill_logs(logs& out, std::string_view prefix) const {
    if (prefix.empty()) {
      out.set("loss", loss_mean.result());
      if (has_regularizers) out.set("regularization_loss", regularization_mean.result());
      for (auto& m : metrics) out.set(m->name(), m->result());
    } else {
      out.set("val_loss", loss_mean.result());
      if (has_regularizers) out.set("val_regularization_loss", regularization_mean.result());
      for (auto& m : metrics) out.set(validation_name(m->name()), m->result());
    }
  }

  // The means as evaluate returns them.
  evaluation results() const {
    logs all;
    fill_logs(all, "");
    evaluation out;
    for (const auto& entry : all) out.emplace(std::string(entry.name), entry.value);
    return out;
  }

  // The running means as a checkpoint written inside an epoch keeps them,
  // by name: "loss", "regularization_loss", each metric's.
  std::map<std::string, std::vector<double>> means() const {
    std::map<std::string, std::vector<double>> out;
    const auto pair = [](const metrics::mean& m) {
      const auto s = m.state();
      return std::vector<double>{s[0], s[1]};
    };
    out["loss"] = pair(loss_mean);
    out["regularization_loss"] = pair(regularization_mean);
    for (const auto& m : metrics) {
      auto s = m->state();
      if (!s.empty()) out[std::string(m->name())] = std::move(s);
    }
    return out;
  }
  // Puts them back (after reset_metrics: a metric the map lacks starts at zero).
  void restore_means(const std::map<std::string, std::vector<double>>& saved) {
    const auto put = [&](metrics::mean& m, const char* name) {
      const auto found = saved.find(name);
      if (found != saved.end() && found->second.size() == 2) m.restore({found->second[0], found->second[1]});
    };
    put(loss_mean, "loss");
    put(regularization_mean, "regularization_loss");
    for (auto& m : metrics) {
      const auto found = saved.find(std::string(m->name()));
      if (found != saved.end()) m->restore(found->second);
    }
  }

  // During fit: where it is (fit_loop keeps it up to date), so that a
  // checkpoint written by a callback records it (fit_snapshot.hpp).
  struct fit_in_progress {
    int epoch = 0;                          // the epoch to continue at
    std::int64_t step = 0;                  // its batches trained
    const history* so_far = nullptr;        // the epochs completed
    std::span<callback* const> callbacks;   // the user's, in fit's order
    const logs* epoch_end_logs = nullptr;   // during on_epoch_end: the epoch's logs, not yet in so_far
  };
  // The snapshot of the fit in progress, or nothing between fits.
  std::optional<fit_snapshot> snapshot() const {
    if (!running_fit) return std::nullopt;
    fit_snapshot s;
    s.epoch = running_fit->epoch;
    s.step = running_fit->step;
    if (s.step > 0) {
      s.epoch_key = epoch_counter - 1;  // the epoch in progress took the last key
      s.means = means();
    }
    if (running_fit->so_far) s.history = running_fit->so_far->values;
    if (running_fit->epoch_end_logs)  // the epoch that is ending, which History records last
      for (const log_entry& e : *running_fit->epoch_end_logs) s.history[std::string(e.name)].push_back(e.value);
    for (std::size_t i = 0; i < running_fit->callbacks.size(); ++i) {
      const callback* c = running_fit->callbacks[i];
      callback_state state;
      c->save_state(state);
      if (!state.numbers.empty() || !state.tensors.empty())
        s.callbacks[callback_state_key(i, *c)] = std::move(state);
    }
    return s;
  }
  static std::string callback_state_key(std::size_t position, const callback& c) {
    return std::to_string(position) + "." + std::string(c.state_name());
  }

  std::unique_ptr<detail::optimizer_base> optimizer;
  std::unique_ptr<detail::loss_base> loss;
  detail::output_losses* per_output = nullptr;  // the loss, when the network has several outputs
  std::vector<std::unique_ptr<detail::metric_base>> metrics;
  int slots = 0;                    // the optimizer's state slots, each the parameter region's size
  std::int64_t iterations = 0;      // updates applied (a skipped or accumulating step does not count)
  std::vector<float> class_weights;  // during a fit given class_weight: each class's (train/row_weights.hpp)
  std::uint64_t epoch_counter = 0;  // epochs begun, the pipeline's shuffle key
  metrics::mean loss_mean;
  metrics::mean regularization_mean;  // the part of the loss the regularizers add
  const fit_in_progress* running_fit = nullptr;  // set by fit_loop while it runs
  bool ema_in_weights = false;                   // use_ema: swap_ema_weights put the average into the weights
  std::optional<fit_snapshot> resume;            // set by load_checkpoint: the next fit continues it

 private:
  // "val_" + name, kept alive for the state's lifetime.
  std::string_view validation_name(std::string_view name) const {
    for (const auto& n : validation_names_)
      if (std::string_view(n).substr(4) == name) return n;
    validation_names_.push_back("val_" + std::string(name));
    return validation_names_.back();
  }
  mutable std::deque<std::string> validation_names_;  // deque: views into it stay valid
};

}  // namespace typeflow

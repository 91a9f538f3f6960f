// What compile() keeps: the optimizer, the loss and the metrics, each behind a
// small virtual interface called once per step over whole arrays.
//
// The per-element and per-row work inside each call is fully typed and
// inlined; only the call itself is indirect, so a model type can be compiled
// with any optimizer, loss and metrics without becoming a new type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>
#include <algorithm>

#include "typeflow/losses/losses.hpp"
#include "typeflow/core/row_ranking.hpp"
#include "typeflow/optimizers/optimizers.hpp"

namespace typeflow::detail {

struct optimizer_base {
  virtual ~optimizer_base() = default;
  // The state slots, each the parameter region's size: the optimizer's own,
  // then, with use_ema, the moving average (ema_slot()).
  virtual int slots() const = 0;
  virtual std::optional<int> ema_slot() const = 0;
  virtual std::string_view name() const = 0;
  // The learning rate of update number `iteration` (1-based).
  virtual double learning_rate(std::int64_t iteration) const = 0;
  // Runs the optimizer on this step's gradients; returns whether the weights
  // changed (an accumulating optimizer updates once every K steps).
  virtual bool update(const optimizers::update_arguments& arguments) = 0;
  // The same over a region in shards, each on its replica (zero<k>,
  // optimizers/sharded_update.hpp): an optimizer with a rule, or
  // accumulate<K> of one; the engine checks the gradients first.
  virtual bool update_shards(const optimizers::sharded_update& update) = 0;
  // Whether update() honours arguments.non_finite (checks the gradients in
  // its own pass and then changes nothing); if not, the model checks them first.
  virtual bool checks_non_finite() const = 0;
  // Whether update() writes arguments.tensor_copies, the weights' bf16 copies,
  // as it updates them (precision/weight_copies.hpp), and changes the weights
  // in no other way after that.
  virtual bool writes_weight_copies() const = 0;
  // accumulate<K>: the micro-batches added since the last update (a
  // checkpoint keeps them; the accumulator is one of the slots).
  virtual int pending_micro_batches() const = 0;
  virtual void restore_pending_micro_batches(int n) = 0;
  // K for accumulate<K>, 1 for an optimizer that updates every batch: at
  // most K - 1 micro-batches can be pending.
  virtual int micro_batches_per_update() const = 0;
  // Keras's model.optimizer.learning_rate = rate (optimizers/learning_rate_field.hpp),
  // and the constant rate it holds, if it holds one (a checkpoint keeps it).
  virtual void set_learning_rate(double rate) = 0;
  virtual std::optional<double> constant_learning_rate() const = 0;
};

template <class Optimizer>
struct optimizer_holder final : optimizer_base {
  Optimizer optimizer;
  optimizers::ema_options ema;  // use_ema: the average is the slot after the optimizer's own
  explicit optimizer_holder(Optimizer o) : optimizer(std::move(o)), ema(optimizers::ema_options_of(optimizer)) {
    optimizers::check_ema_options(ema, Optimizer::name);
  }
  int slots() const override { return optimizer.slot_count() + (ema.use_ema ? 1 : 0); }
  std::optional<int> ema_slot() const override {
    return ema.use_ema ? std::optional<int>(optimizer.slot_count()) : std::nullopt;
  }
  std::string_view name() const override { return Optimizer::name; }
  double learning_rate(std::int64_t iteration) const override { return optimizer.learning_rate(iteration - 1); }
  bool update(const optimizers::update_arguments& arguments) override {
    const bool updated = update_weights(arguments);
    const bool refused = arguments.non_finite && *arguments.non_finite;  // the NaN policy changed nothing
    if (updated && !refused && ema.use_ema)
      optimizers::update_moving_average(arguments, arguments.slots[optimizer.slot_count()], ema, arguments.iteration);
    return updated;
  }
  bool update_shards(const optimizers::sharded_update& update) override {
    bool updated = true;
    if constexpr (!optimizers::updates_in_shards<Optimizer>()) {
      throw std::logic_error(std::string(Optimizer::name) + ": an optimizer without a rule cannot update in shards (zero<k>)");
    } else if constexpr (requires { optimizer.accumulate_and_update_shards(update); }) {
      updated = optimizer.accumulate_and_update_shards(update);
    } else {
      optimizers::apply_sharded_update(optimizer, update);
    }
    // use_ema: each replica's shard of the average, beside its shard of the
    // weights (a shard's arguments hold its pieces, offsets from its start),
    // before the all-gather spreads any overwrite.
    if (updated && ema.use_ema) {
      auto average = [&](int s) {
        const optimizers::update_arguments& a = update.arguments[static_cast<std::size_t>(s)];
        if (a.floats > 0) optimizers::update_moving_average(a, a.slots[optimizer.slot_count()], ema, a.iteration);
      };
      update.run(average);
    }
    return updated;
  }
  bool update_weights(const optimizers::update_arguments& arguments) {
    if constexpr (requires { optimizer.accumulate_and_update(arguments); }) {
      return optimizer.accumulate_and_update(arguments);
    } else if constexpr (optimizers::rule_optimizer<Optimizer>) {
      optimizers::apply_update(optimizer, arguments);  // what a rule optimizer's update() is
      return true;
    } else {
      optimizer.update(arguments);
      return true;
    }
  }
  bool checks_non_finite() const override {
    return optimizers::rule_optimizer<Optimizer> ||
           requires(Optimizer& o, const optimizers::update_arguments& a) { o.accumulate_and_update(a); };
  }
  // A rule optimizer's pass writes them (optimizers/update.hpp); an EMA that
  // overwrites the weights afterwards would leave them stale.
  bool writes_weight_copies() const override {
    return optimizers::rule_optimizer<Optimizer> && !(ema.use_ema && ema.ema_overwrite_frequency);
  }
  int pending_micro_batches() const override {
    if constexpr (requires { optimizer.micro_batches; })
      return optimizer.micro_batches;
    else
      return 0;
  }
  void restore_pending_micro_batches(int n) override {
    if constexpr (requires { optimizer.micro_batches; })
      optimizer.micro_batches = n;
    else if (n != 0)
      throw std::invalid_argument("load_checkpoint: the checkpoint holds " + std::to_string(n) +
                                  " accumulated micro-batches, but the optimizer does not accumulate");
  }
  int micro_batches_per_update() const override {
    if constexpr (requires { Optimizer::steps; })
      return Optimizer::steps;
    else
      return 1;
  }
  void set_learning_rate(double rate) override { optimizers::set_constant_learning_rate(optimizer, Optimizer::name, rate); }
  std::optional<double> constant_learning_rate() const override {
    const auto* field = optimizers::learning_rate_field(const_cast<Optimizer&>(optimizer));
    if (!field || !field->is_constant()) return std::nullopt;
    return (*field)(0);
  }
};

struct loss_base {
  virtual ~loss_base() = default;
  virtual losses::label_form form() const = 0;
  virtual std::string_view name() const = 0;
  virtual void sparse(const float*, const std::int32_t*, std::ptrdiff_t, int, std::ptrdiff_t, float*,
                      float*) const = 0;
  virtual void dense(const float*, const float*, std::ptrdiff_t, int, std::ptrdiff_t, float*,
                     float*) const = 0;
};

template <class Loss>
struct loss_holder final : loss_base {
  Loss loss;
  explicit loss_holder(Loss l) : loss(std::move(l)) {}
  losses::label_form form() const override { return Loss::labels; }
  std::string_view name() const override { return Loss::name; }
  void sparse(const float* out, const std::int32_t* ids, std::ptrdiff_t rows, int classes,
              std::ptrdiff_t valid, float* d_out, float* row_loss) const override {
    if constexpr (Loss::labels == losses::label_form::sparse) loss(out, ids, rows, classes, valid, d_out, row_loss);
  }
  void dense(const float* out, const float* targets, std::ptrdiff_t rows, int classes,
             std::ptrdiff_t valid, float* d_out, float* row_loss) const override {
    if constexpr (Loss::labels == losses::label_form::dense)
      loss(out, targets, rows, classes, valid, d_out, row_loss);
  }
};

struct metric_base {
  virtual ~metric_base() = default;
  virtual std::string_view name() const = 0;
  virtual void reset() = 0;
  virtual double result() const = 0;
  // The running value's state (empty when the metric keeps none to give).
  virtual std::vector<double> state() const = 0;
  virtual void restore(std::span<const double> state) = 0;
  virtual void update(const float* out, const std::int32_t* ids, std::ptrdiff_t valid, int classes) = 0;
  virtual void update(const float* out, const float* targets, std::ptrdiff_t valid, int classes) = 0;
  // What a GPU may count for it instead of sending the outputs back
  // (core/row_ranking.hpp's hit_count_rule), for these labels; none for most.
  virtual std::optional<hit_count_rule> device_hits(bool, int) const { return std::nullopt; }
  // A step's hits so counted, over its `rows`.
  virtual void add_hits(double, std::ptrdiff_t) {
    throw std::logic_error("typeflow: metric " + std::string(name()) + " has no hit count");
  }
};

template <class Metric>
struct metric_holder final : metric_base {
  Metric metric;
  explicit metric_holder(Metric m) : metric(std::move(m)) {}
  std::string_view name() const override { return Metric::name; }
  void reset() override { metric.reset(); }
  double result() const override { return metric.result(); }
  std::vector<double> state() const override {
    if constexpr (requires { metric.state(); }) {
      const auto s = metric.state();
      return {s.begin(), s.end()};
    } else {
      return {};
    }
  }
  void restore(std::span<const double> state) override {
    if constexpr (requires { metric.state(); }) {
      auto s = metric.state();
      if (state.size() != s.size()) return;  // a checkpoint of another metric: starts afresh
      std::copy(state.begin(), state.end(), s.begin());
      metric.restore(s);
    }
  }
  void update(const float* out, const std::int32_t* ids, std::ptrdiff_t valid, int classes) override {
    if constexpr (requires { metric.update(out, ids, valid, classes); })
      metric.update(out, ids, valid, classes);
    else
      throw std::invalid_argument("typeflow: metric " + std::string(Metric::name) +
                                  " needs dense targets, but the labels are class ids");
  }
  void update(const float* out, const float* targets, std::ptrdiff_t valid, int classes) override {
    if constexpr (requires { metric.update(out, targets, valid, classes); })
      metric.update(out, targets, valid, classes);
    else
      throw std::invalid_argument("typeflow: metric " + std::string(Metric::name) +
                                  " needs class-id labels, but the labels are dense targets");
  }
  std::optional<hit_count_rule> device_hits(bool sparse_labels, int classes) const override {
    if constexpr (requires { metric.device_hits(sparse_labels, classes); })
      return metric.device_hits(sparse_labels, classes);
    else
      return std::nullopt;
  }
  void add_hits(double hits, std::ptrdiff_t rows) override {
    if constexpr (requires { metric.add_hits(hits, rows); })
      metric.add_hits(hits, rows);
    else
      throw std::logic_error("typeflow: metric " + std::string(Metric::name) + " has no hit count");
  }
};

template <class M>
concept metric = requires(M m, const float* out, const std::int32_t* ids, const float* t) {
  { M::name } -> std::convertible_to<std::string_view>;
  m.reset();
  { m.result() } -> std::convertible_to<double>;
};

}  // namespace typeflow::detail

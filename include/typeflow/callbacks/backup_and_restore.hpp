// callbacks::backup_and_restore: Keras's BackupAndRestore, with its arguments.
//
//   tf::callbacks::backup_and_restore backup("backup", {.save_freq = 100});
//   model.fit(train, {.epochs = 10, .callbacks = {&backup}});   // killed in epoch 4, batch 230
//   model.fit(train, {.epochs = 10, .callbacks = {&backup}});   // in a new process: continues at
//                                                               // epoch 4 after batch 200
//
// It saves a checkpoint of the whole run (model.save_checkpoint: weights,
// optimizer, counters, fit's epoch and batch, History, every callback's
// state) into backup_dir after each epoch, or every save_freq batches. When
// fit starts and backup_dir holds a checkpoint, it loads it, and fit
// continues exactly where that checkpoint was written, mid-epoch included:
// the same batches follow, and the weights, losses and History end as an
// uninterrupted run's would, bit for bit. When training ends (not when it
// is interrupted by an exception or a kill) the backup is deleted, unless
// delete_checkpoint is false. double_checkpoint keeps the previous backup
// too, and falls back to it when the newest cannot be read. fit's `epochs`
// is the run's total, as in Keras. Put it last in fit's callbacks, so that
// the state it saves at an epoch's end includes the others' for that epoch.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "typeflow/io/checkpoint.hpp"
#include "typeflow/callbacks/callback.hpp"

namespace typeflow::callbacks {

struct backup_and_restore_options {
  std::int64_t save_freq = 0;  // 0: after each epoch (Keras's "epoch"); n > 0: every n batches
  bool double_checkpoint = false;
  bool delete_checkpoint = true;
};

class backup_and_restore : public callback {
 public:
  explicit backup_and_restore(std::filesystem::path backup_dir, backup_and_restore_options options = {})
      : dir_(std::move(backup_dir)), options_(options) {
    if (dir_.empty()) throw std::invalid_argument("backup_and_restore: backup_dir is empty");
    if (options_.save_freq < 0)
      throw std::invalid_argument("backup_and_restore: save_freq must be 0 (each epoch) or positive");
  }

  const std::filesystem::path& backup_dir() const noexcept { return dir_; }
  // Whether the fit that ran last continued from a backup, and which.
  bool restored() const noexcept { return !restored_from_.empty(); }
  const std::filesystem::path& restored_from() const noexcept { return restored_from_; }

  void on_train_begin() override {
    batches_since_save_ = 0;
    restored_from_.clear();
    if (!model()) return;
    const auto all = io::list_checkpoints(dir_);
    if (all.empty()) return;
    try {
      model()->load_checkpoint(all.back());
      restored_from_ = all.back();
    } catch (const std::exception& newest) {
      if (!options_.double_checkpoint || all.size() < 2) throw;
      std::fprintf(stderr, "backup_and_restore: the newest backup cannot be used (%s); using the one before it\n",
                   newest.what());
      model()->load_checkpoint(all[all.size() - 2]);
      restored_from_ = all[all.size() - 2];
    }
  }

  void on_batch_end(std::int64_t, const logs&) override {
    if (options_.save_freq > 0 && ++batches_since_save_ >= options_.save_freq) {
      batches_since_save_ = 0;
      save();
    }
  }

  void on_epoch_end(const epoch_info&, const logs&) override {
    if (options_.save_freq == 0) save();
  }

  void on_train_end(const logs&) override {
    if (!options_.delete_checkpoint || !model() || !model()->is_chief()) return;
    io::remove_checkpoints(dir_);  // each out of its name before it goes; dir_ too when empty
  }

  std::string_view state_name() const override { return "backup_and_restore"; }
  void save_state(callback_state& s) const override {
    s.numbers["batches_since_save"] = static_cast<double>(batches_since_save_);
  }
  void load_state(const callback_state& s) override {
    batches_since_save_ = static_cast<std::int64_t>(s.number("batches_since_save").value_or(0));
  }

 private:
  void save() {
    if (model()) model()->save_checkpoint(dir_, options_.double_checkpoint ? 2 : 1);
  }

  std::filesystem::path dir_;
  backup_and_restore_options options_;
  std::int64_t batches_since_save_ = 0;
  std::filesystem::path restored_from_;
};

}  // namespace typeflow::callbacks

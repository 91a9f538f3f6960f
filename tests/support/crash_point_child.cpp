// The run tests/standalone/crash_points_test.cpp kills: 3 epochs of the
// resume fixture's classifier (6 batches each, shuffled, with dropout) under
// backup_and_restore, saving every 4 batches (mid-epoch too) and keeping the
// previous backup (double_checkpoint), then the final parameter region,
// written to OUT. Started again after a kill, it continues from the backup.
//
//   typeflow_crash_point_child BACKUP_DIR OUT
//
// Exits 0 when training finished and OUT is written, 1 with a message on
// stderr otherwise.
#include <cstdio>
#include <exception>
#include <fstream>

#include <typeflow/typeflow.hpp>

#include "resume_fixture.hpp"

namespace tf = typeflow;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: typeflow_crash_point_child BACKUP_DIR OUT\n");
    return 2;
  }
  try {
    tf::model<tf::testing::dropout_classifier> model{5};
    model.compile(tf::optimizers::adam{.learning_rate = 0.01}, tf::losses::sparse_categorical_crossentropy{.from_logits = true});
    tf::callbacks::backup_and_restore backup(argv[1], {.save_freq = 4, .double_checkpoint = true});
    model.fit(tf::testing::classifier_data(), {.epochs = 3, .callbacks = {&backup}, .verbose = 0});
    const auto region = model.parameter_region();
    std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(region.data()), static_cast<std::streamsize>(region.size_bytes()));
    out.close();
    if (!out) throw std::runtime_error(std::string("cannot write ") + argv[2]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "typeflow_crash_point_child: %s\n", e.what());
    return 1;
  }
}

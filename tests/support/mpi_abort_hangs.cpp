// An LD_PRELOAD library for the MPI failure tests: its MPI_Abort never
// returns and ends nothing, as Open MPI's has done when its runtime lost the
// abort (open-mpi/ompi #1379). typeflow's abort watchdog must end the
// process anyway (tests/CMakeLists.txt: mpi.multi_worker.rank_1_stall_abort-hangs).
//
// Not built with the sanitizers: it is loaded into sanitized programs
// (ASAN_OPTIONS=verify_asan_link_order=0 lets ASan accept it first).
#include <mpi.h>
#include <unistd.h>

#include <cstdio>

extern "C" int MPI_Abort(MPI_Comm, int) {
  std::fprintf(stderr, "mpi_abort_hangs: MPI_Abort called; hanging instead of aborting\n");
  std::fflush(stderr);
  for (;;) ::pause();
}

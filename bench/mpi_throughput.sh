#!/usr/bin/env bash
# multi_worker's scaling: the 784-1024-1024-10 MLP's training step (Adam,
# global batch 256) as one process and as N MPI workers, in one run.
#
#   bench/mpi_throughput.sh [--np N] [--steps S] [--repeat R]
#   bench/mpi_throughput.sh --zero [--np N] [--steps S] [--repeat R]
#
# 1. Builds build/bench/mpi_train_step (bench/mpi_train_step.cpp; configures
#    build/ as Release first if it has no cache; BUILD_DIR overrides the folder).
# 2. Takes turns, R rounds (default 3), between
#      one worker:  OMP_NUM_THREADS=T build/bench/mpi_train_step S       (batch 256)
#      N workers:   mpirun -np N -x OMP_NUM_THREADS=T build/bench/mpi_train_step S
#                   (256 / N per worker, each on its own core)
#    with T = 1 thread per worker (default N = 2, S = 40 timed steps after 5
#    warm-up steps), and, for reference, one process with N OpenMP threads
#    (the same cores, used by threads instead of processes).
# 3. Prints every round's line, then the best samples/s of each, and the
#    scaling efficiency = samples/s of N workers / (N x samples/s of one
#    worker with the same threads per worker); 100% is perfect scaling.
#
# --zero instead takes turns between N workers under multi_worker, zero<1,
# multi_worker>, zero<2, multi_worker> and zero<3, multi_worker> (each worker
# keeping its shard of Adam's slots, of the mean gradient, and of the
# weights, gathered layer by layer), and prints each one's samples/s,
# rank 0's arena and its step time against multi_worker's.
#
# Every figure counts global samples per second. allreduce_ms is one
# gradient all-reduce (1.9 M floats) alone. The load average is printed
# before and after: other processes on the machine take cores from the N
# workers more than from the single one.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_dir=${BUILD_DIR:-build}
np=2
steps=40
repeat=3
zero=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --np) np=$2; shift ;;
    --steps) steps=$2; shift ;;
    --repeat) repeat=$2; shift ;;
    --zero) zero=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "mpi_throughput.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

source scripts/setup.sh
[[ -f "${build_dir}/CMakeCache.txt" ]] || setup_configure "${build_dir}"
setup_build "${build_dir}" --target mpi_train_step >/dev/null
program="${build_dir}/bench/mpi_train_step"

mpirun_flags=(-np "${np}" -x OMP_NUM_THREADS=1)
((EUID == 0)) && mpirun_flags+=(--allow-run-as-root)
(($(nproc) < np)) && mpirun_flags+=(--oversubscribe)

field() { sed -n "s/.*[[:space:]]$1=\([^[:space:]]*\).*/\1/p" <<<"$2"; }
best() { sort -g | tail -1; }

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name:[[:space:]]*//p')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

if ((zero)); then
  strategies=(multi_worker zero1 zero2 zero3)
  declare -A rates arenas
  for ((round = 1; round <= repeat; ++round)); do
    for strategy in "${strategies[@]}"; do
      line=$(mpirun "${mpirun_flags[@]}" "${program}" "${steps}" "${strategy}")
      echo "round ${round}, mpirun -np ${np}, ${strategy}: ${line}"
      rates[${strategy}]+="$(field samples_per_second "${line}") "
      arenas[${strategy}]=$(field arena_MiB "${line}")
    done
  done
  echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
  plain=$(tr ' ' '\n' <<<"${rates[multi_worker]}" | sed '/^$/d' | best)
  echo
  echo "best of each, mpirun -np ${np} (global batch 256, Adam, 784-1024-1024-10):"
  for strategy in "${strategies[@]}"; do
    rate=$(tr ' ' '\n' <<<"${rates[${strategy}]}" | sed '/^$/d' | best)
    awk -v s="${strategy}" -v r="${rate}" -v p="${plain}" -v a="${arenas[${strategy}]}" 'BEGIN {
      printf "  %-13s %10.1f samples/s   rank 0 arena %7.2f MiB   step time %.3fx multi_worker'"'"'s\n", s, r, a, p / r
    }'
  done
  exit 0
fi
one=() many=() threads=()
for ((round = 1; round <= repeat; ++round)); do
  line=$(OMP_NUM_THREADS=1 "${program}" "${steps}")
  echo "round ${round}, 1 process x 1 thread:    ${line}"
  one+=("$(field samples_per_second "${line}")")
  line=$(mpirun "${mpirun_flags[@]}" "${program}" "${steps}")
  echo "round ${round}, mpirun -np ${np} x 1 thread: ${line}"
  many+=("$(field samples_per_second "${line}")")
  line=$(OMP_NUM_THREADS="${np}" "${program}" "${steps}")
  echo "round ${round}, 1 process x ${np} threads:   ${line}"
  threads+=("$(field samples_per_second "${line}")")
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"

one_best=$(printf '%s\n' "${one[@]}" | best)
many_best=$(printf '%s\n' "${many[@]}" | best)
threads_best=$(printf '%s\n' "${threads[@]}" | best)
awk -v one="${one_best}" -v many="${many_best}" -v threads="${threads_best}" -v np="${np}" 'BEGIN {
  printf "\nbest of each (global batch 256, Adam, 784-1024-1024-10), samples/s:\n"
  printf "  1 process,  1 thread:            %10.1f\n", one
  printf "  mpirun -np %d, 1 thread each:     %10.1f\n", np, many
  printf "  1 process,  %d threads:           %10.1f\n", np, threads
  printf "scaling efficiency, %d workers vs 1: %.0f%% (%.2fx of one worker; ideal %dx)\n", np, 100 * many / (np * one), many / one, np
  printf "%d workers vs 1 process with %d threads: %.2fx\n", np, np, many / threads
}'

#!/usr/bin/env bash
# typeflow vs PyTorch, one training step of the same MLP, in one run.
#
#   bench/compare_pytorch.sh [--no-mnist] [--min-time SECONDS] [--repeat N] [--typeflow-passive]
#
# 1. Finds a python3 that imports torch (installs Debian's python3-torch if none
#    does) and makes sure PyTorch's BLAS is an optimised one: Debian's
#    python3-torch calls sgemm through libblas.so.3, and where that is the
#    reference (netlib) BLAS its Linear layers run at ~2 GFLOP/s, so the
#    script installs libopenblas0-pthread in that case
#    (TYPEFLOW_BENCH_KEEP_BLAS=1 skips that and compares against whatever is there).
# 2. Builds build/bench/train_step_bench with CMake (configures build/ as
#    Release first if it has no cache; BUILD_DIR overrides the folder).
# 3. Runs, taking turns for N rounds (--repeat, default 3), typeflow's
#    BM_mlp_train_step (784-1024-1024-10, Adam, batch 256; at least
#    --min-time seconds, default 3) and bench/pytorch_mlp.py with the same
#    model, and prints the best samples/s of each side, their ratio, and every
#    round's figures; then the same for the MNIST example's 784-512-512-10 at
#    batch 128 unless --no-mnist.
#
# Environment for both sides: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset
# (where the machine sets them they halve OpenBLAS's sgemm) and
# OMP_NUM_THREADS=2. PyTorch additionally gets OMP_WAIT_POLICY=PASSIVE and a
# glibc malloc that keeps big blocks (mmap/trim thresholds); without those
# PyTorch 1.13 here is several times slower. --typeflow-passive gives typeflow
# OMP_WAIT_POLICY=PASSIVE too: on a quiet machine it changes little, but when
# other processes compete for the cores, libgomp's default spin-then-sleep
# barriers cost typeflow far more than they cost PyTorch (whose gemm threads
# are OpenBLAS's). Both figures come from the same
# run of this script, so they share the machine's load at the time; the load
# average is printed before and after.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_dir=${BUILD_DIR:-build}
min_time=3
repeat=3
run_mnist=1
typeflow_passive=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --no-mnist) run_mnist=0 ;;
    --min-time) min_time=$2; shift ;;
    --repeat) repeat=$2; shift ;;
    --typeflow-passive) typeflow_passive=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "compare_pytorch.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

# --- 1. PyTorch ---------------------------------------------------------------
source "$root/bench/pytorch_env.sh"
pytorch_env_setup compare_pytorch.sh

# --- 2. typeflow's benchmark ----------------------------------------------------
build_type=$(configure_release_build "$build_dir")
log "building train_step_bench"
cmake --build "$build_dir" --target train_step_bench >&2
bench=$build_dir/bench/train_step_bench

# --- 3. Both sides ---------------------------------------------------------------
side_environments "$typeflow_passive"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# typeflow_rate FILTER: samples/s of the one benchmark FILTER selects.
typeflow_rate() {
  local json=$tmp/$1.json
  "${typeflow_env[@]}" "$bench" --benchmark_filter="^$1/" --benchmark_min_time="$min_time" \
    --benchmark_format=json >"$json" 2>"$tmp/$1.err" || { cat "$tmp/$1.err" >&2; return 1; }
  "$python" - "$json" <<'EOF'
import json, sys
runs = [b for b in json.load(open(sys.argv[1]))["benchmarks"] if b.get("run_type", "iteration") == "iteration"]
if len(runs) != 1:
    sys.exit(f"expected one benchmark, got {[b['name'] for b in runs]}")
run = runs[0]
if run.get("error_occurred"):
    sys.exit(f"{run['name']}: {run.get('error_message')}")
print(f"{run['items_per_second']:.1f} {run['GFLOP/s']:.2f} {run['of_peak']:.3f} {run['iterations']} {run['real_time']:.2f}{run['time_unit']}")
EOF
  # The machine's float32 FMA peak, from the benchmark's own probe (bench/fma_peak.hpp).
  [[ -s $tmp/fma_peak ]] || "$python" -c 'import json, sys; print("%.1f" % float(json.load(open(sys.argv[1]))["context"]["fma_peak_float32_gflops"]))' \
    "$json" >"$tmp/fma_peak"
}

# pytorch_rate ARGS...: samples/s from pytorch_mlp.py's last line.
pytorch_rate() {
  local line
  line=$("${torch_env[@]}" "$python" bench/pytorch_mlp.py --min-time "$min_time" "$@" | tail -n 1)
  echo "   $line" >&2
  [[ $line =~ samples_per_second=([0-9.]+) ]] || { echo "pytorch_mlp.py printed: $line" >&2; return 1; }
  echo "${BASH_REMATCH[1]}"
}

echo "typeflow vs PyTorch: one training step (forward, loss, backward, Adam), float32, CPU"
echo "date:      $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "machine:   $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(uname -r)"
echo "load avg:  $(cut -d' ' -f1-3 /proc/loadavg) (before); CPU busy just before the runs (2 s sample, both cores): $(cpu_busy)%"
echo "threads:   OMP_NUM_THREADS=2 on both sides; torch.set_num_threads(2)"
echo "env:       typeflow: ${typeflow_env[*]:1}"
echo "           PyTorch:  ${torch_env[*]:1}"
echo "typeflow:  $bench ($build_type), oneDNN $(dpkg-query -W -f='${Version}' libdnnl2 2>/dev/null || echo '?')"
echo "pytorch:   $python, torch $("$python" -c 'import torch; print(torch.__version__)')"
echo "torch BLAS mapped: $blas"
echo "torch.__config__.show():"
torch_config=$("${typeflow_env[@]}" "$python" -c 'import torch; print(torch.__config__.show())')
head -n 8 <<<"$torch_config" | cut -c1-160 | sed 's/^/    /'
echo

rows=()
details=()
measure() {  # measure LABEL BENCH_FILTER PYTORCH_ARGS...
  local label=$1 filter=$2
  shift 2
  local round tf_out tf_sps tf_gflops tf_of_peak tf_iterations tf_time pt_sps
  local tf_all=() pt_all=() tf_best=0 tf_best_gflops=0 tf_best_of_peak=0 pt_best=0
  # The two sides take turns, so that a burst of load elsewhere hits one
  # round of each rather than all of one side; the best round of each counts.
  for ((round = 1; round <= repeat; ++round)); do
    log "round $round/$repeat: typeflow $filter (min time ${min_time}s)"
    tf_out=$(typeflow_rate "$filter")
    read -r tf_sps tf_gflops tf_of_peak tf_iterations tf_time <<<"$tf_out"
    echo "   typeflow samples_per_second=$tf_sps GFLOP/s=$tf_gflops of_peak=$tf_of_peak iterations=$tf_iterations time/step=$tf_time" >&2
    log "round $round/$repeat: pytorch_mlp.py $*"
    pt_sps=$(pytorch_rate "$@")
    tf_all+=("$tf_sps"); pt_all+=("$pt_sps")
    if awk -v a="$tf_sps" -v b="$tf_best" 'BEGIN { exit !(a > b) }'; then tf_best=$tf_sps; tf_best_gflops=$tf_gflops; tf_best_of_peak=$tf_of_peak; fi
    if awk -v a="$pt_sps" -v b="$pt_best" 'BEGIN { exit !(a > b) }'; then pt_best=$pt_sps; fi
  done
  rows+=("$(printf '%-26s %14s %10s %7s %14s %8.2f' "$label" "$tf_best" "$tf_best_gflops" "$tf_best_of_peak" "$pt_best" \
              "$(awk -v a="$tf_best" -v b="$pt_best" 'BEGIN { print a / b }')")")
  details+=("$(printf '%-26s typeflow %s | PyTorch %s' "$label" "${tf_all[*]}" "${pt_all[*]}")")
}

measure "784-1024-1024-10, b=256" BM_mlp_train_step --batch 256 --hidden 1024
if [[ $run_mnist == 1 ]]; then
  measure "784-512-512-10, b=128" BM_mlp_784_512_512_10 --batch 128 --hidden 512
fi

echo "best of $repeat alternating rounds, samples/s; the machine's float32 FMA peak (typeflow's probe): $(cat "$tmp/fma_peak") GFLOP/s"
printf '%-26s %14s %10s %7s %14s %8s\n' "model, batch" "typeflow smp/s" "tf GFLOP/s" "of peak" "PyTorch smp/s" "ratio"
printf '%s\n' "${rows[@]}"
echo "every round, samples/s:"
printf '%s\n' "${details[@]}"
echo "load avg:  $(cut -d' ' -f1-3 /proc/loadavg) (after)"
echo "(other processes on the machine slow both sides, OpenMP's spinning threads most: compare figures from a quiet machine)"
echo "(ratio = typeflow / PyTorch samples per second; GFLOP/s = 3 x forward FLOPs per sample x samples/s; of peak = GFLOP/s / FMA peak)"

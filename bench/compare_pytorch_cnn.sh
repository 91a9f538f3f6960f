#!/usr/bin/env bash
# typeflow vs PyTorch, convolutional training steps, in one run.
#
#   bench/compare_pytorch_cnn.sh [--config mnist_cnn|conv|both] [--repeat N] [--min-time SECONDS]
#                                [--pytorch-only] [--typeflow-passive]
#
# 1. Finds a python3 that imports torch (installs Debian's python3-torch if none
#    does) and makes sure PyTorch's BLAS is an optimised one (Debian's
#    python3-torch runs its Linear layers through libblas.so.3; where that is
#    the reference BLAS, libopenblas0-pthread is installed;
#    TYPEFLOW_BENCH_KEEP_BLAS=1 skips that). (bench/pytorch_env.sh, shared
#    with bench/compare_pytorch_gpt.sh.)
# 2. Unless --pytorch-only, builds build/bench/cnn_train_step with CMake
#    (configures build/ as Release first if it has no cache; BUILD_DIR
#    overrides the folder).
# 3. For each configuration (--config, default both: mnist_cnn, then conv),
#    runs typeflow's `cnn_train_step --config C --min-time S` and
#    bench/pytorch_cnn.py --config C --min-time S, taking turns for N rounds
#    (--repeat, default 3), and prints every round, the best images/s of each
#    side, their ratio (typeflow / PyTorch), GFLOP/s and both peak RSS
#    figures. --min-time (default 3 s) is passed to both sides. With
#    --pytorch-only only the PyTorch side runs (N rounds).
#
# Configurations (see bench/cnn_train_step.cpp and bench/pytorch_cnn.py),
# batch 128, float32, one train_on_batch per step:
#   mnist_cnn: conv 32x3x3, relu, maxpool 2, conv 64x3x3, relu, maxpool 2,
#              flatten, dense 128, relu, dense 10 (225,034 parameters);
#              Adam(1e-3, eps 1e-7), sparse cross-entropy on logits
#   conv:      the CNN's second convolution alone, (13, 13, 32) -> (11, 11, 64),
#              forward + kernel and bias gradients (no input gradient),
#              mean squared error, SGD(1e-3)
# typeflow computes channels-last (NHWC); PyTorch runs its default NCHW.
# GFLOP/s = 3 x forward FLOPs of the convolutions and dense layers per second
# (a convention: the conv config has no input gradient, so its real work is
# 2 x forward).
#
# Environment for both sides: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset
# and OMP_NUM_THREADS=2. PyTorch additionally gets OMP_WAIT_POLICY=PASSIVE
# and a glibc malloc that keeps big blocks (mmap/trim thresholds);
# --typeflow-passive gives typeflow OMP_WAIT_POLICY=PASSIVE too. Both figures
# come from the same run of this script, so they share the machine's load at
# the time; the load average is printed before and after.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_dir=${BUILD_DIR:-build}
min_time=3
repeat=3
config=both
pytorch_only=0
typeflow_passive=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --config) config=$2; shift ;;
    --repeat) repeat=$2; shift ;;
    --min-time) min_time=$2; shift ;;
    --pytorch-only) pytorch_only=1 ;;
    --typeflow-passive) typeflow_passive=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "compare_pytorch_cnn.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
case $config in
  mnist_cnn|conv) configs=("$config") ;;
  both) configs=(mnist_cnn conv) ;;
  *) echo "compare_pytorch_cnn.sh: --config must be mnist_cnn, conv or both, not $config" >&2; exit 2 ;;
esac
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "compare_pytorch_cnn.sh: --repeat needs a positive integer" >&2; exit 2; }
[[ $min_time =~ ^[0-9]*\.?[0-9]+$ ]] || { echo "compare_pytorch_cnn.sh: --min-time needs a number of seconds" >&2; exit 2; }

# --- 1. PyTorch ---------------------------------------------------------------
source "$root/bench/pytorch_env.sh"
pytorch_env_setup compare_pytorch_cnn.sh

# --- 2. typeflow's benchmark ----------------------------------------------------
build_typeflow_bench compare_pytorch_cnn.sh cnn_train_step

# --- 3. Both sides ---------------------------------------------------------------
side_environments "$typeflow_passive"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run_side SIDE CONFIG: runs one side once; prints
# "IMAGES_PER_S STEP_MS PEAK_RSS_MIB PARAMS GFLOP_PER_S" and echoes the
# program's own last line to stderr.
run_side() {
  local side=$1 cfg=$2 line
  local output=$tmp/$side-$cfg.out
  # The typeflow binary prints Google Benchmark's table first; its summary
  # line may follow the table's colour codes on the same line.
  if [[ $side == typeflow ]]; then
    "${typeflow_env[@]}" "$bench" --config "$cfg" --min-time "$min_time" --benchmark_color=false >"$output" 2>"$output.err" ||
      { cat "$output" "$output.err" >&2; echo "compare_pytorch_cnn.sh: $bench failed" >&2; return 1; }
  else
    "${torch_env[@]}" "$python" bench/pytorch_cnn.py --config "$cfg" --min-time "$min_time" >"$output" 2>"$output.err" ||
      { cat "$output" "$output.err" >&2; echo "compare_pytorch_cnn.sh: bench/pytorch_cnn.py failed" >&2; return 1; }
  fi
  line=$(sed 's/\x1b\[[0-9;]*m//g' "$output" | grep "^$side config=$cfg " | tail -n 1 || true)
  echo "   ${line:-(no summary line)}" >&2
  local num='([0-9.eE+-]+)'
  local re="^$side config=$cfg images_per_second=$num step_ms=$num peak_rss_mib=$num params=([0-9]+) gflop_per_second=$num"
  [[ $line =~ $re ]] || {
    cat "$output" "$output.err" >&2
    echo "compare_pytorch_cnn.sh: no '$side config=$cfg images_per_second=... step_ms=... peak_rss_mib=... params=... gflop_per_second=...' line in $side's output" >&2
    return 1
  }
  # The FMA probe's line: "fma_peak float32_gflops=... bf16_gflops=... threads=..."
  [[ $side != typeflow || -s $tmp/fma_peak ]] ||
    sed 's/\x1b\[[0-9;]*m//g' "$output" | grep -m 1 '^fma_peak ' >"$tmp/fma_peak" || true
  echo "${BASH_REMATCH[1]} ${BASH_REMATCH[2]} ${BASH_REMATCH[3]} ${BASH_REMATCH[4]} ${BASH_REMATCH[5]}"
}

gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }

echo "typeflow vs PyTorch: convolutional training steps (forward, loss, backward, update), float32, CPU, batch 128"
echo "date:      $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "machine:   $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(uname -r)"
echo "load avg:  $(cut -d' ' -f1-3 /proc/loadavg) (before); CPU busy just before the runs (2 s sample, all cores): $(cpu_busy)%"
echo "threads:   OMP_NUM_THREADS=2 on both sides; torch.set_num_threads(2)"
echo "env:       typeflow: ${typeflow_env[*]:1}"
echo "           PyTorch:  ${torch_env[*]:1}"
if [[ $pytorch_only == 0 ]]; then
  echo "typeflow:  $bench ($build_type), channels-last (NHWC), oneDNN $(dpkg-query -W -f='${Version}' libdnnl2 2>/dev/null || echo '?')"
else
  echo "typeflow:  not run (--pytorch-only)"
fi
echo "pytorch:   $python, torch $("$python" -c 'import torch; print(torch.__version__)'), default NCHW memory format"
echo "torch BLAS mapped: $blas"
echo "min time:  $min_time s per run; $repeat round(s) per configuration"
echo

sides=(typeflow pytorch)
[[ $pytorch_only == 1 ]] && sides=(pytorch)
rows=()
details=()
for cfg in "${configs[@]}"; do
  declare -A best_ips=() best_ms=() best_gf=() best_rss=() all=() n_params=()
  for side in "${sides[@]}"; do best_ips[$side]=0; all[$side]=""; done
  # The two sides take turns, so that a burst of load elsewhere hits one
  # round of each rather than all of one side; the best round of each counts.
  for ((round = 1; round <= repeat; ++round)); do
    for side in "${sides[@]}"; do
      log "config $cfg, round $round/$repeat: $side"
      out=$(run_side "$side" "$cfg")
      read -r ips ms rss params gf <<<"$out"
      echo "round $round $(printf '%-8s' "$side") config=$cfg images_per_second=$ips step_ms=$ms peak_rss_mib=$rss params=$params gflop_per_second=$gf"
      all[$side]+="${all[$side]:+ }$ips"
      n_params[$side]=$params
      if gt "$ips" "${best_ips[$side]}"; then best_ips[$side]=$ips; best_ms[$side]=$ms; best_gf[$side]=$gf; fi
      # Peak RSS: the largest any round reached (it barely varies).
      if [[ -z ${best_rss[$side]:-} ]] || gt "$rss" "${best_rss[$side]}"; then best_rss[$side]=$rss; fi
    done
  done
  if [[ $pytorch_only == 0 ]]; then
    [[ ${n_params[typeflow]} == "${n_params[pytorch]}" ]] ||
      log "warning: config $cfg: typeflow counts ${n_params[typeflow]} parameters, PyTorch ${n_params[pytorch]}"
    ratio=$(awk -v a="${best_ips[typeflow]}" -v b="${best_ips[pytorch]}" 'BEGIN { print a / b }')
    rows+=("$(printf '%-9s %12s %12s %7.2f %10s %10s %9s %9s %10s %10s %8s' "$cfg" \
                "${best_ips[typeflow]}" "${best_ips[pytorch]}" "$ratio" \
                "${best_ms[typeflow]}" "${best_ms[pytorch]}" "${best_gf[typeflow]}" "${best_gf[pytorch]}" \
                "${best_rss[typeflow]}" "${best_rss[pytorch]}" "${n_params[pytorch]}")")
    details+=("$(printf '%-9s typeflow %s | PyTorch %s' "$cfg" "${all[typeflow]}" "${all[pytorch]}")")
  else
    rows+=("$(printf '%-9s %12s %10s %9s %10s %8s' "$cfg" "${best_ips[pytorch]}" "${best_ms[pytorch]}" \
                "${best_gf[pytorch]}" "${best_rss[pytorch]}" "${n_params[pytorch]}")")
    details+=("$(printf '%-9s PyTorch %s' "$cfg" "${all[pytorch]}")")
  fi
  unset best_ips best_ms best_gf best_rss all n_params
done

echo
echo "best of $repeat round(s), images/s (step ms and GFLOP/s of that round; peak RSS in MiB, the largest of the rounds):"
if [[ $pytorch_only == 0 ]]; then
  [[ -s $tmp/fma_peak ]] && echo "the machine's FMA peak (typeflow's probe, GFLOP/s): $(sed 's/^fma_peak //' "$tmp/fma_peak")"
  printf '%-9s %12s %12s %7s %10s %10s %9s %9s %10s %10s %8s\n' config "typeflow i/s" "PyTorch i/s" ratio \
    "tf ms" "pt ms" "tf GF/s" "pt GF/s" "tf RSS MiB" "pt RSS MiB" params
else
  printf '%-9s %12s %10s %9s %10s %8s\n' config "PyTorch i/s" "pt ms" "pt GF/s" "pt RSS MiB" params
fi
printf '%s\n' "${rows[@]}"
echo "every round, images/s:"
printf '%s\n' "${details[@]}"
echo "load avg:  $(cut -d' ' -f1-3 /proc/loadavg) (after)"
echo "(other processes on the machine slow both sides: compare figures from a quiet machine)"
[[ $pytorch_only == 0 ]] && echo "(ratio = typeflow / PyTorch images per second; GF/s = 3 x forward FLOPs per second)"
exit 0

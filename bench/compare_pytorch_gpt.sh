#!/usr/bin/env bash
# typeflow vs PyTorch, one training step of the same small GPT, in one run.
#
#   bench/compare_pytorch_gpt.sh [--config small|large|both|gpt2] [--repeat N] [--min-time SECONDS]
#                                [--policy float32|mixed_bfloat16] [--pytorch-only] [--typeflow-passive]
#
# 1. Finds a python3 that imports torch (installs Debian's python3-torch if none
#    does) and makes sure PyTorch's BLAS is an optimised one: Debian's
#    python3-torch calls sgemm through libblas.so.3, and where that is the
#    reference (netlib) BLAS its Linear layers run at ~2 GFLOP/s, so the
#    script installs libopenblas0-pthread in that case
#    (TYPEFLOW_BENCH_KEEP_BLAS=1 skips that and compares against whatever is there).
#    (bench/pytorch_env.sh, shared with bench/compare_pytorch.sh.)
# 2. Unless --pytorch-only, builds build/bench/gpt_train_step with CMake
#    (configures build/ as Release first if it has no cache; BUILD_DIR
#    overrides the folder).
# 3. For each configuration (--config, default both: small, then large), runs
#    typeflow's `gpt_train_step --config C --min-time S` and
#    bench/pytorch_gpt.py --config C --min-time S, taking turns for N rounds
#    (--repeat, default 2), and prints every round, the best tokens/s of each
#    side, their ratio (typeflow / PyTorch), typeflow's GFLOP/s as a fraction
#    of the machine's FMA peak (its own probe, bench/fma_peak.hpp), and both
#    peak RSS figures beside typeflow's arena (its compile-time memory plan).
#    --min-time, passed to both sides, defaults to 5 s for small and 20 s for
#    large (pytorch_gpt.py's own defaults); a large PyTorch step takes ~9 s on
#    2 quiet cores here, so a large round is about a minute per side. With
#    --pytorch-only only the PyTorch side runs (N rounds).
#
# Models (see bench/pytorch_gpt.py): nanoGPT-style, V=65, untied head,
# exact GELU, AdamW(1e-3, betas (0.9, 0.99), weight decay 0.1), float32; with
# --policy mixed_bfloat16, typeflow's mixed_bfloat16 against PyTorch's CPU
# autocast to bfloat16 (float32 weights and optimizer on both sides).
#   small: 4 layers, 4 heads, n_embd 128, block 64,  batch 12
#   large: 6 layers, 6 heads, n_embd 384, block 256, batch 64
#   gpt2:  GPT-2 124M (V 50257, 1024 positions, tanh GELU, tied head),
#          block 64, batch 4; not part of "both"
#
# Environment for both sides: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset
# (where the machine sets them they halve OpenBLAS's sgemm) and
# OMP_NUM_THREADS=2. PyTorch additionally gets OMP_WAIT_POLICY=PASSIVE and a
# glibc malloc that keeps big blocks (mmap/trim thresholds); without those
# PyTorch 1.13 here is several times slower. --typeflow-passive gives typeflow
# OMP_WAIT_POLICY=PASSIVE too. Both figures come from the same run of this
# script, so they share the machine's load at the time; the load average is
# printed before and after.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_dir=${BUILD_DIR:-build}
min_time=
repeat=2
config=both
policy=float32
pytorch_only=0
typeflow_passive=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --config) config=$2; shift ;;
    --repeat) repeat=$2; shift ;;
    --min-time) min_time=$2; shift ;;
    --policy) policy=$2; shift ;;
    --pytorch-only) pytorch_only=1 ;;
    --typeflow-passive) typeflow_passive=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "compare_pytorch_gpt.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
case $config in
  small|large|gpt2) configs=("$config") ;;
  both) configs=(small large) ;;
  *) echo "compare_pytorch_gpt.sh: --config must be small, large, both or gpt2, not $config" >&2; exit 2 ;;
esac
case $policy in
  float32|mixed_bfloat16) ;;
  *) echo "compare_pytorch_gpt.sh: --policy must be float32 or mixed_bfloat16, not $policy" >&2; exit 2 ;;
esac
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "compare_pytorch_gpt.sh: --repeat needs a positive integer" >&2; exit 2; }
# min_time_for CONFIG: the --min-time both sides get.
min_time_for() {
  if [[ -n $min_time ]]; then echo "$min_time"
  elif [[ $1 == large || $1 == gpt2 ]]; then echo 20
  else echo 5
  fi
}

# --- 1. PyTorch ---------------------------------------------------------------
source "$root/bench/pytorch_env.sh"
pytorch_env_setup compare_pytorch_gpt.sh

# --- 2. typeflow's benchmark ----------------------------------------------------
build_typeflow_bench compare_pytorch_gpt.sh gpt_train_step

# --- 3. Both sides ---------------------------------------------------------------
side_environments "$typeflow_passive"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run_side SIDE CONFIG: runs one side once; prints "TOKENS_PER_S STEP_MS PEAK_RSS_MIB PARAMS
# ARENA_MIB GFLOP_PER_S OF_PEAK" (the last three "-" for PyTorch) and echoes the program's
# own last line to stderr.
run_side() {
  local side=$1 cfg=$2 line seconds
  seconds=$(min_time_for "$cfg")
  local output=$tmp/$side-$cfg.out
  # The typeflow binary prints Google Benchmark's table first; its summary
  # line may follow the table's colour codes on the same line.
  if [[ $side == typeflow ]]; then
    "${typeflow_env[@]}" "$bench" --config "$cfg" --policy "$policy" --min-time "$seconds" --benchmark_color=false >"$output" 2>"$output.err" ||
      { cat "$output" "$output.err" >&2; echo "compare_pytorch_gpt.sh: $bench failed" >&2; return 1; }
  else
    "${torch_env[@]}" "$python" bench/pytorch_gpt.py --config "$cfg" --policy "$policy" --min-time "$seconds" >"$output" 2>"$output.err" ||
      { cat "$output" "$output.err" >&2; echo "compare_pytorch_gpt.sh: bench/pytorch_gpt.py failed" >&2; return 1; }
  fi
  line=$(sed 's/\x1b\[[0-9;]*m//g' "$output" | grep "^$side config=$cfg " | tail -n 1 || true)
  echo "   ${line:-(no summary line)}" >&2
  local re="^$side config=$cfg tokens_per_second=([0-9.eE+-]+) step_ms=([0-9.eE+-]+) peak_rss_mib=([0-9.eE+-]+) params=([0-9]+)"
  [[ $line =~ $re ]] || {
    cat "$output" >&2
    echo "compare_pytorch_gpt.sh: no '$side config=$cfg tokens_per_second=... step_ms=... peak_rss_mib=... params=...' line in $side's output" >&2
    return 1
  }
  local fields="${BASH_REMATCH[1]} ${BASH_REMATCH[2]} ${BASH_REMATCH[3]} ${BASH_REMATCH[4]}"
  if [[ $side == typeflow ]]; then
    re="arena_mib=([0-9.]+) gflop_per_second=([0-9.]+) of_peak=([0-9.]+)"
    [[ $line =~ $re ]] || { echo "compare_pytorch_gpt.sh: no arena_mib, gflop_per_second, of_peak in: $line" >&2; return 1; }
    fields+=" ${BASH_REMATCH[1]} ${BASH_REMATCH[2]} ${BASH_REMATCH[3]}"
    # The probe's line: "fma_peak float32_gflops=... bf16_gflops=... threads=..."
    [[ -s $tmp/fma_peak ]] || sed 's/\x1b\[[0-9;]*m//g' "$output" | grep -m 1 '^fma_peak ' >"$tmp/fma_peak" || true
  else
    fields+=" - - -"
  fi
  echo "$fields"
}

gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }

echo "typeflow vs PyTorch: one GPT training step (forward, loss, backward, AdamW), $policy, CPU"
echo "date:      $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "machine:   $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(uname -r)"
echo "load avg:  $(cut -d' ' -f1-3 /proc/loadavg) (before); CPU busy just before the runs (2 s sample, all cores): $(cpu_busy)%"
echo "threads:   OMP_NUM_THREADS=2 on both sides; torch.set_num_threads(2)"
echo "env:       typeflow: ${typeflow_env[*]:1}"
echo "           PyTorch:  ${torch_env[*]:1}"
if [[ $pytorch_only == 0 ]]; then
  echo "typeflow:  $bench ($build_type), oneDNN $(dpkg-query -W -f='${Version}' libdnnl2 2>/dev/null || echo '?')"
else
  echo "typeflow:  not run (--pytorch-only)"
fi
echo "pytorch:   $python, torch $("$python" -c 'import torch; print(torch.__version__)')"
echo "torch BLAS mapped: $blas"
echo "min time:  $(for c in "${configs[@]}"; do printf '%s %s s; ' "$c" "$(min_time_for "$c")"; done)$repeat round(s) per configuration"
echo

sides=(typeflow pytorch)
[[ $pytorch_only == 1 ]] && sides=(pytorch)
rows=()
details=()
for cfg in "${configs[@]}"; do
  declare -A best_tps=() best_ms=() best_rss=() best_gflops=() best_of_peak=() all=() n_params=()
  arena=-
  for side in "${sides[@]}"; do best_tps[$side]=0; all[$side]=""; done
  # The two sides take turns, so that a burst of load elsewhere hits one
  # round of each rather than all of one side; the best round of each counts.
  for ((round = 1; round <= repeat; ++round)); do
    for side in "${sides[@]}"; do
      log "config $cfg, round $round/$repeat: $side"
      out=$(run_side "$side" "$cfg")
      read -r tps ms rss params arena_mib gflops of_peak <<<"$out"
      echo "round $round $(printf '%-8s' "$side") config=$cfg tokens_per_second=$tps step_ms=$ms peak_rss_mib=$rss params=$params"
      all[$side]+="${all[$side]:+ }$tps"
      n_params[$side]=$params
      if gt "$tps" "${best_tps[$side]}"; then
        best_tps[$side]=$tps; best_ms[$side]=$ms; best_gflops[$side]=$gflops; best_of_peak[$side]=$of_peak
      fi
      [[ $side == typeflow ]] && arena=$arena_mib
      # Peak RSS: the largest any round reached (it barely varies).
      if [[ -z ${best_rss[$side]:-} ]] || gt "$rss" "${best_rss[$side]}"; then best_rss[$side]=$rss; fi
    done
  done
  if [[ $pytorch_only == 0 ]]; then
    [[ ${n_params[typeflow]} == "${n_params[pytorch]}" ]] ||
      log "warning: config $cfg: typeflow counts ${n_params[typeflow]} parameters, PyTorch ${n_params[pytorch]}"
    ratio=$(awk -v a="${best_tps[typeflow]}" -v b="${best_tps[pytorch]}" 'BEGIN { print a / b }')
    rows+=("$(printf '%-6s %12s %12s %7.2f %11s %11s %10s %7s %10s %12s %12s %10s' "$cfg" \
                "${best_tps[typeflow]}" "${best_tps[pytorch]}" "$ratio" \
                "${best_ms[typeflow]}" "${best_ms[pytorch]}" "${best_gflops[typeflow]}" "${best_of_peak[typeflow]}" \
                "$arena" "${best_rss[typeflow]}" "${best_rss[pytorch]}" "${n_params[pytorch]}")")
    details+=("$(printf '%-6s typeflow %s | PyTorch %s' "$cfg" "${all[typeflow]}" "${all[pytorch]}")")
  else
    rows+=("$(printf '%-6s %12s %11s %12s %10s' "$cfg" "${best_tps[pytorch]}" "${best_ms[pytorch]}" \
                "${best_rss[pytorch]}" "${n_params[pytorch]}")")
    details+=("$(printf '%-6s PyTorch %s' "$cfg" "${all[pytorch]}")")
  fi
  unset best_tps best_ms best_rss best_gflops best_of_peak all n_params
done

echo
echo "best of $repeat round(s), tokens/s (step ms and typeflow's GFLOP/s of that round; peak RSS in MiB, the largest of the rounds):"
if [[ $pytorch_only == 0 ]]; then
  [[ -s $tmp/fma_peak ]] && echo "the machine's FMA peak (typeflow's probe, GFLOP/s): $(sed 's/^fma_peak //' "$tmp/fma_peak")"
  printf '%-6s %12s %12s %7s %11s %11s %10s %7s %10s %12s %12s %10s\n' config "typeflow t/s" "PyTorch t/s" ratio \
    "tf step ms" "pt step ms" "tf GFLOP/s" "of peak" "tf arena" "tf RSS MiB" "pt RSS MiB" params
else
  printf '%-6s %12s %11s %12s %10s\n' config "PyTorch t/s" "pt step ms" "pt RSS MiB" params
fi
printf '%s\n' "${rows[@]}"
echo "every round, tokens/s:"
printf '%s\n' "${details[@]}"
echo "load avg:  $(cut -d' ' -f1-3 /proc/loadavg) (after)"
echo "(other processes on the machine slow both sides: compare figures from a quiet machine)"
[[ $pytorch_only == 0 ]] &&
  echo "(ratio = typeflow / PyTorch tokens per second; of peak = GFLOP/s over the policy's FMA peak; tf arena = the memory plan, MiB)"
exit 0

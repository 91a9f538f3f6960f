#!/usr/bin/env bash
# The GPU check, in one call, for a machine with an NVIDIA GPU, nvcc and
# PyTorch but no Debian packages (this project's lent H200):
#
#   bench/gpu/bundle.sh                      # here: build for sm_90, pack .gpu-bundle/typeflow-gpu.tar.xz
#   bench/gpu/run.sh --dry                   # here: the bundle's libraries resolve, the tests skip plainly
#   device run (carry .gpu-bundle): bash bench/gpu/run.sh
#
# Phases, each under its own time cap, each writing its log under $OUT as it
# goes (at most eight files: the device tool brings back no more), and a
# failed phase never stops the next:
#   probe     device, driver, nvcc, the library folders found, PyTorch and
#             cuDNN, ldd of every binary (a binary with a library "not found"
#             is rebuilt here with nvcc, from the bundle's headers)
#   tests     typeflow_cuda_tests, each case with its duration; after a crash
#             or a hang, every case again in a process of its own
#   memcheck  compute-sanitizer's memcheck over the kernel tests
#   gemm      the ceilings (a 2 GiB device copy, bf16 GEMMs) and the GEMM
#             sweep: typeflow's (cuBLASLt), then PyTorch's
#   norm      layer_norm and softmax cross-entropy kernels, then PyTorch's
#   mlp       the MLP training step, then PyTorch eager's
#   gpt2      GPT-2 124M's step (bf16, 16 x 1024 tokens): tokens/s, MFU and
#             memory, then PyTorch's eager and torch.compile (torch_gpt2.py)
#   readers   TensorBoard's reader and transformers' GPT-2 over files typeflow
#             wrote (bench/gpu/readers.py)
#   algos     (only when named) cuBLASLt's candidates timed, beside torch.matmul
# and last a summary table: what each phase found and how long it took.
#
# Options: --dry (here, no GPU: unpack, check the libraries, start the
# tests, stop), --phases "tests memcheck" (run only these after the probe).
# SKIP_MEMCHECK=1 leaves memcheck out.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
OUT=${OUT:-/tmp/typeflow-gpu}
mkdir -p "$OUT"
work=${WORK:-/tmp/typeflow-gpu-run}
bundle=$root/.gpu-bundle/typeflow-gpu.tar.xz
dry=0
phases="tests memcheck gemm norm mlp gpt2 readers"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry) dry=1 ;;
    --phases) phases=$2; shift ;;
    *) echo "run.sh: unknown option $1 (--dry, --phases \"...\")" >&2; exit 2 ;;
  esac
  shift
done
[ "${SKIP_MEMCHECK:-0}" = 1 ] && phases=${phases//memcheck/}
summary=$OUT/summary.log
: > "$summary"
log() { echo "== $* ($(date -u +%H:%M:%S))" | tee -a "$summary"; }
rows=()  # the summary table: "phase|status|seconds|what it found"
row() { rows+=("$1|$2|$3|$4"); }
started=$SECONDS

# --- the bundle ---------------------------------------------------------------
[ -f "$bundle" ] || { log "no bundle at $bundle: run bench/gpu/bundle.sh here and carry .gpu-bundle"; exit 2; }
rm -rf "$work"
mkdir -p "$work"
tar -xJf "$bundle" -C "$work" 2>/dev/null || python3 -m tarfile -e "$bundle" "$work" ||
  { log "could not unpack $bundle"; exit 2; }
home=$work/typeflow-gpu
bin=$home/bin
log "bundle: $(head -1 "$home/COMMIT" | cut -c1-12), $(cat "$home/NVCC"), $(ls "$bin" | wc -l) binaries"

# --- library folders: the toolkit's first, then PyTorch's nvidia-* wheels ----
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cuda_root=$(dirname "$(dirname "$NVCC")")
site_dirs=$(python3 -c "import site, sys; print(' '.join(site.getsitepackages() + [site.getusersitepackages()]))" 2>/dev/null)
find_library_dir() {  # find_library_dir libcublasLt -> the folder holding libcublasLt.so*, or nothing
  local d s
  for d in "$cuda_root/lib64" "$cuda_root/lib" "$cuda_root/targets/x86_64-linux/lib" /usr/lib/x86_64-linux-gnu; do
    ls "$d/$1".so* >/dev/null 2>&1 && { echo "$d"; return; }
  done
  for s in $site_dirs; do
    [ -d "$s/nvidia" ] || continue
    d=$(find "$s/nvidia" -name "$1.so*" 2>/dev/null | sort | head -1)
    [ -n "$d" ] && { dirname "$d"; return; }
  done
}
cublas_dir=$(find_library_dir libcublasLt)
nccl_dir=$(find_library_dir libnccl)
cudnn_dir=$(find_library_dir libcudnn)
# Our binaries' library path, and only theirs: PyTorch, given the toolkit's
# cuDNN ahead of its own, refuses to start (seen on the H200, 2026-12-04).
# Their output is line-buffered, so that a phase cut at its cap keeps what
# it printed.
ours=(env "LD_LIBRARY_PATH=$home/lib${cublas_dir:+:$cublas_dir}${nccl_dir:+:$nccl_dir}${cudnn_dir:+:$cudnn_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
command -v stdbuf >/dev/null && ours+=(stdbuf -oL -eL)

# --- probe --------------------------------------------------------------------
provided='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libcuda|libcublas|libcublasLt|libnccl|libcudnn[a-z_]*|libstdc\+\+|libgcc_s)\.so'
missing_libraries() {  # missing_libraries BINARY -> the libraries it cannot load here, one a line
  "${ours[@]}" ldd "$1" 2>&1 | awk '/not found/ {print $1}' | { if [ $dry = 1 ]; then grep -v '^libcuda\.so'; else cat; fi; }
  if [ $dry = 1 ]; then  # here the system has everything: each carried one must come from the bundle
    "${ours[@]}" ldd "$1" | awk '/=>/ && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
      [[ "$name" =~ $provided ]] || [[ "$path" == "$home/lib/"* ]] || echo "$name (from $path, not the bundle)"
    done
  fi
}
probe() {
  log "probe"
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,temperature.gpu,power.draw \
      --format=csv 2>&1 || echo "nvidia-smi: not available"
    echo "nvcc: $("$NVCC" --version 2>/dev/null | tail -1)"
    echo "cuBLASLt: ${cublas_dir:-NOT FOUND}"
    echo "NCCL: ${nccl_dir:-NOT FOUND}"
    echo "cuDNN: ${cudnn_dir:-NOT FOUND}"
    timeout 20 python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'cuDNN', \
torch.backends.cudnn.version(), 'device', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')" 2>&1 |
      tail -1
    echo "compute-sanitizer: $(command -v compute-sanitizer || ls "$cuda_root/bin/compute-sanitizer" 2>/dev/null || echo none)"
    echo "host CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores"
  } > "$OUT/probe.log" 2>&1
  cat "$OUT/probe.log"
  local b missing broken=()
  for b in "$bin"/*; do
    missing=$(missing_libraries "$b")
    if [ -n "$missing" ]; then
      echo "ldd $(basename "$b"): MISSING $(echo "$missing" | tr '\n' ' ')" | tee -a "$OUT/probe.log"
      broken+=("$(basename "$b")")
    else
      echo "ldd $(basename "$b"): all resolve" >> "$OUT/probe.log"
    fi
  done
  if [ ${#broken[@]} -eq 0 ]; then
    row probe ok $((SECONDS - started)) "every binary's libraries resolve"
  elif [ $dry = 1 ]; then
    row probe FAILED $((SECONDS - started)) "unresolved: ${broken[*]}"
  else
    rebuild "${broken[@]}"
  fi
}

# A binary whose libraries do not resolve here is compiled here with nvcc,
# against the bundle's headers and libraries (bench/gpu/gather_deps.sh).
rebuild() {
  local t0=$SECONDS deps=$home/deps arch=${CUDA_ARCH:-90}
  local includes=(-Iinclude -isystem "$deps/include")
  for d in "$cublas_dir" "$nccl_dir"; do [ -n "$d" ] && [ -d "$d/../include" ] && includes+=(-isystem "$d/../include"); done
  [ -f "$cuda_root/include/nccl.h" ] || includes+=(-isystem "$deps/nccl")
  local nvflags=(-std=c++20 --expt-relaxed-constexpr -diag-suppress=445,186,1675 -arch=sm_$arch -O2
                 -Xcompiler=-fopenmp,-fno-math-errno "${includes[@]}")
  local libs=(-L"$home/lib" -l:libdnnl.so.2 -l:libpcre2-8.so.0 -l:libz.so.1 -l:libmpi_cxx.so.40 -l:libmpi.so.40
              "$(ls "$cublas_dir"/libcublasLt.so* | head -1)" "$(ls "$cublas_dir"/libcublas.so* | head -1)"
              "$(ls "$nccl_dir"/libnccl.so* | head -1)" -lgomp -lpthread)
  local name ok=()
  for name in "$@"; do
    log "rebuild $name with nvcc here"
    if [ "$name" = typeflow_cuda_tests ]; then
      local objects=() s
      for s in tests/cuda/*.cu; do
        "$NVCC" "${nvflags[@]}" -c "$s" -o "$work/$(basename "$s").o" &
        objects+=("$work/$(basename "$s").o")
      done
      for s in tests/cuda/*.cpp; do
        g++ -std=c++20 -O2 -fopenmp -fno-math-errno "${includes[@]}" -I"$cuda_root/include" -c "$s" -o "$work/$(basename "$s").o" &
        objects+=("$work/$(basename "$s").o")
      done
      wait
      "$NVCC" -arch=sm_$arch "${objects[@]}" -o "$bin/$name" "${libs[@]}"
    else
      "$NVCC" "${nvflags[@]}" "bench/gpu/$name.cu" -o "$bin/$name" "${libs[@]}" -l:libbenchmark.so.1debian
    fi >> "$OUT/probe.log" 2>&1 && ok+=("$name")
  done
  row probe rebuilt $((SECONDS - t0)) "rebuilt here: ${ok[*]:-none} of $*"
}

# --- tests --------------------------------------------------------------------
tests() {
  local t0=$SECONDS cap=${TESTS_CAP:-240} rc
  log "tests (cap ${cap} s)"
  timeout -k 5 "$cap" "${ours[@]}" "$bin/typeflow_cuda_tests" --duration=true > "$OUT/tests.log" 2>&1
  rc=$?
  local counts
  counts=$(grep -E '^\[doctest\] (test cases|assertions):' "$OUT/tests.log" | tr -s ' ' | tr '\n' ' ')
  if [ $rc -le 1 ]; then
    row tests "$([ $rc = 0 ] && echo ok || echo FAILED)" $((SECONDS - t0)) "$counts"
    grep -E '^\[doctest\] test cases:' "$OUT/tests.log"
    return
  fi
  # A crash or a hang ends the binary: run each case alone, in what time is left.
  echo "== the whole run ended with status $rc$([ $rc = 124 ] && echo ' (cap reached)'); each case alone now" | tee -a "$OUT/tests.log"
  local name passed=0 failed=0 left
  while IFS= read -r name; do
    left=$((cap + 120 - (SECONDS - t0)))
    [ $left -gt 5 ] || { echo "(out of time before: $name)" >> "$OUT/tests.log"; failed=$((failed + 1)); continue; }
    local filter=${name//\\/\\\\}
    filter=${filter//,/\\,}
    echo "-- $name" >> "$OUT/tests.log"
    timeout -k 5 $((left < 60 ? left : 60)) "${ours[@]}" "$bin/typeflow_cuda_tests" --duration=true -tc="$filter" >> "$OUT/tests.log" 2>&1
    rc=$?
    if [ $rc = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "   status $rc" >> "$OUT/tests.log"; fi
  done < <("${ours[@]}" "$bin/typeflow_cuda_tests" --list-test-cases --no-version 2>/dev/null | grep -vE '^\[doctest\]|^=+$|^$')
  row tests FAILED $((SECONDS - t0)) "crashed or hung whole; alone: $passed passed, $failed failed"
}

# --- memcheck -----------------------------------------------------------------
memcheck() {
  local t0=$SECONDS cap=${MEMCHECK_CAP:-100} sanitizer rc
  sanitizer=$(command -v compute-sanitizer || echo "$cuda_root/bin/compute-sanitizer")
  [ -x "$sanitizer" ] || { row memcheck skipped 0 "no compute-sanitizer"; return; }
  log "memcheck over the kernel tests (cap ${cap} s)"
  # The kernel tests: the element-wise, optimizer, matmul, normalization and
  # loss kernels and the runtime; the model tests run the same kernels. Not
  # the runtime's error test: its failing cudaMalloc is on purpose, and
  # memcheck counts every failed call as an error.
  local kernels='map and map2*,to_16bit*,activations*,dropout*,element-wise*,each optimizer*,gradient statistics*'
  kernels+=',a non-finite gradient*,cuda matmul*,layer_norm kernels*,softmax*,mean_of*,cuda runtime*'
  timeout -k 5 "$cap" "${ours[@]}" "$sanitizer" --tool memcheck --error-exitcode 99 --print-limit 30 \
    "$bin/typeflow_cuda_tests" -tc="$kernels" -tce='cuda runtime: errors name*' > "$OUT/memcheck.log" 2>&1
  rc=$?
  local errors
  errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+ error' "$OUT/memcheck.log" | tail -1)
  case $rc in
    0) row memcheck ok $((SECONDS - t0)) "${errors:-no summary}" ;;
    124) row memcheck capped $((SECONDS - t0)) "cap reached; ${errors:-no summary}" ;;
    *) row memcheck FAILED $((SECONDS - t0)) "status $rc; ${errors:-no summary}" ;;
  esac
}

# --- benchmarks beside PyTorch ---------------------------------------------------
export PYTHONUNBUFFERED=1
counter() {  # counter LOG BENCHMARK-REGEX COUNTER -> the counter's value on the first matching line
  grep -E "^$2 " "$1" | head -1 | grep -oE "$3=[0-9.]+[kMG]?" | cut -d= -f2
}
gemm() {
  local t0=$SECONDS
  log "gemm: ceilings and sweep, typeflow then torch (cap 150 s)"
  timeout -k 5 60 "${ours[@]}" "$bin/gemm_bench" > "$OUT/gemm.log" 2>&1
  timeout -k 5 90 python3 bench/gpu/torch_gemm.py --samples 10 >> "$OUT/gemm.log" 2>&1
  local tf_copy tf_bf16 torch_copy torch_bf16
  tf_copy=$(counter "$OUT/gemm.log" 'copy/device_to_device/2GiB[^ ]*' 'GB/s')
  tf_bf16=$(counter "$OUT/gemm.log" 'gemm/bfloat16/8192x8192x8192[^ ]*' 'TFLOP/s')
  torch_copy=$(grep -oE '^copy/device_to_device/2GiB GB/s=[0-9.]+' "$OUT/gemm.log" | cut -d= -f2)
  torch_bf16=$(awk '$1 == "8192x8192x8192" && $2 == "bfloat16" {print $4}' "$OUT/gemm.log")
  # GPT-2's head products, the logits' rows 50257 and 50304 (padded) apart.
  local head="" which
  for which in fwd dX dW; do
    head+=" $which $(counter "$OUT/gemm.log" "gemm/bfloat16/logits_$which/ld50257[^ ]*" 'TFLOP/s' || true)"
    head+="/$(counter "$OUT/gemm.log" "gemm/bfloat16/logits_$which/ld50304[^ ]*" 'TFLOP/s' || true)"
  done
  row gemm "$([ -n "$tf_bf16" ] && echo ok || echo FAILED)" $((SECONDS - t0)) \
    "copy GB/s ${tf_copy:-?} (torch ${torch_copy:-?}); bf16 8192^3 TFLOP/s ${tf_bf16:-?} (torch ${torch_bf16:-?});\
 head TFLOP/s unpadded/padded:$head"
}
norm() {
  local t0=$SECONDS
  log "normalization and loss kernels, typeflow then torch (cap 100 s)"
  timeout -k 5 50 "${ours[@]}" "$bin/norm_bench" --benchmark_min_time=0.1 > "$OUT/norm.log" 2>&1
  timeout -k 5 50 python3 bench/gpu/torch_norm.py >> "$OUT/norm.log" 2>&1
  local fwd
  fwd=$(counter "$OUT/norm.log" 'BM_layer_norm_fwd/rows:8192/features:768[^ ]*' 'GB/s')
  row norm "$([ -n "$fwd" ] && echo ok || echo FAILED)" $((SECONDS - t0)) \
    "layer_norm fwd 8192x768 GB/s ${fwd:-?}; rest in norm.log"
}
mlp() {
  local t0=$SECONDS
  log "MLP training step, typeflow then torch eager (cap 90 s)"
  timeout -k 5 45 "${ours[@]}" "$bin/mlp_train_step" --benchmark_min_time=1 > "$OUT/mlp.log" 2>&1
  timeout -k 5 45 python3 bench/gpu/torch_mlp.py --min-time 1 >> "$OUT/mlp.log" 2>&1
  local b rates=""
  for b in 256 4096; do
    rates+="b$b samples/s $(counter "$OUT/mlp.log" "BM_mlp_train_step_b$b[^ ]*" 'samples_per_second' || true)"
    rates+=" (torch $(grep -oE "batch=$b samples_per_second=[0-9]+" "$OUT/mlp.log" | cut -d= -f3)); "
  done
  row mlp "$(grep -q '^BM_mlp_train_step_b256' "$OUT/mlp.log" && echo ok || echo FAILED)" $((SECONDS - t0)) "$rates"
}

gpt2() {
  local t0=$SECONDS
  log "GPT-2 124M training step, typeflow then torch eager and torch.compile (cap 240 s)"
  timeout -k 5 90 "${ours[@]}" "$bin/gpt2_train_step" --benchmark_min_time=3 > "$OUT/gpt2.log" 2>&1
  timeout -k 5 150 python3 bench/gpu/torch_gpt2.py --min-time 3 >> "$OUT/gpt2.log" 2>&1
  local ours_rate torch_rates
  ours_rate="tokens/s $(counter "$OUT/gpt2.log" 'BM_gpt2_train_step[^ ]*' 'tokens_per_second' || true)"
  ours_rate+=" mfu $(counter "$OUT/gpt2.log" 'BM_gpt2_train_step[^ ]*' 'mfu' || true)"
  torch_rates=$(grep -oE 'mode=[a-z]+ batch=[0-9]+ tokens_per_second=[0-9]+ mfu=[0-9.]+' "$OUT/gpt2.log" | tr '\n' ' ')
  row gpt2 "$(grep -q '^BM_gpt2_train_step' "$OUT/gpt2.log" && echo ok || echo FAILED)" $((SECONDS - t0)) \
    "$ours_rate; torch $torch_rates"
}

# Not in the default phases: cuBLASLt's first answer against the fastest of
# its first 16 (bench/gpu/gemm_algos.cu), beside torch.matmul on the same
# products. --phases algos.
algos() {
  local t0=$SECONDS
  log "algos: cuBLASLt's candidates, then torch.matmul (cap 150 s)"
  timeout -k 5 90 "${ours[@]}" "$bin/gemm_algos" > "$OUT/algos.log" 2>&1
  timeout -k 5 60 python3 bench/gpu/torch_gemm.py --gpt2 >> "$OUT/algos.log" 2>&1
  row algos "$(grep -q '^product ' "$OUT/algos.log" && echo ok || echo FAILED)" $((SECONDS - t0)) "see algos.log"
}

readers() {
  local t0=$SECONDS rc
  log "readers (cap 60 s)"
  timeout -k 5 60 python3 bench/gpu/readers.py "$home/readers" > "$OUT/readers.log" 2>&1
  rc=$?
  row readers "$([ $rc = 0 ] && echo ok || echo FAILED)" $((SECONDS - t0)) \
    "$(grep -E '^(tensorboard|transformers)' "$OUT/readers.log" | cut -d';' -f1 | tr '\n' ' ')"
}

# --- the run --------------------------------------------------------------------
probe
if [ $dry = 1 ]; then
  t0=$SECONDS
  "${ours[@]}" "$bin/typeflow_cuda_tests" > "$OUT/tests.log" 2>&1
  rc=$?
  cat "$OUT/tests.log"
  if [ $rc = 77 ] && grep -q 'SKIPPED, no CUDA device' "$OUT/tests.log"; then
    row dry ok $((SECONDS - t0)) "the tests start, say there is no device, exit 77"
  else
    row dry FAILED $((SECONDS - t0)) "typeflow_cuda_tests exited $rc"
  fi
else
  log "device"
  for p in $phases; do "$p"; done
fi

log "summary, $((SECONDS - started)) s in all"
{
  printf '%-9s %-8s %5s  %s\n' phase status s "what it found"
  for r in "${rows[@]}"; do
    IFS='|' read -r a b c d <<<"$r"
    printf '%-9s %-8s %5s  %s\n' "$a" "$b" "$c" "$d"
  done
} | tee -a "$summary"
for r in "${rows[@]}"; do [[ "$r" == *"|FAILED|"* ]] && exit 1; done
exit 0

#!/usr/bin/env bash
# The GPU check, in one script, for a machine with an NVIDIA GPU, nvcc and
# PyTorch but no Debian packages (this project's lent H200):
#
#   bench/gpu/gather_deps.sh                  # here: headers and libraries into .gpu-deps
#   device run: bash bench/gpu/run.sh         # there, carrying .gpu-deps; logs under $OUT
#
# It builds the CUDA tests and benchmarks for sm_90 with nvcc (no CMake: the
# project's CMake wants Debian's packages), runs the tests, then the
# benchmarks beside their PyTorch counterparts: six logs under $OUT (the
# device tool brings back at most eight files).
# `--build-only` stops after building (usable here, without a GPU, to check
# that the carried dependencies suffice).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/typeflow-gpu}
mkdir -p "$OUT"
deps=$PWD/.gpu-deps
build=${BUILD:-build-gpu}
mkdir -p "$build"
arch=${CUDA_ARCH:-90}
jobs=${JOBS:-$(nproc)}
[ -d "$deps" ] || { echo "run.sh: $deps is missing; run bench/gpu/gather_deps.sh first and carry .gpu-deps" >&2; exit 2; }
NVCC=${NVCC:-nvcc}
command -v "$NVCC" >/dev/null || NVCC=/usr/local/cuda/bin/nvcc

includes=(-Iinclude -isystem "$deps/include")
# cuBLASLt and NCCL: from the toolkit where it has them, else from PyTorch's
# wheels (nvidia-cublas, nvidia-nccl-cu13), headers and libraries both.
cuda_root=$(dirname "$(dirname "$(command -v "$NVCC")")")
wheel_dir() {  # wheel_dir nvidia.nccl -> the package folder, or nothing
  python3 -c "import $1 as m; print(list(m.__path__)[0])" 2>/dev/null
}
find_library_dir() {  # find_library_dir <libname> <wheel module>
  local d
  for d in "$cuda_root/lib64" "$cuda_root/lib" "$cuda_root/targets/x86_64-linux/lib" /usr/lib/x86_64-linux-gnu; do
    ls "$d/$1".so* >/dev/null 2>&1 && { echo "$d"; return; }
  done
  d=$(wheel_dir "$2")
  [ -n "$d" ] && ls "$d/lib/$1".so* >/dev/null 2>&1 && echo "$d/lib"
}
cublas_dir=$(find_library_dir libcublasLt nvidia.cublas)
nccl_dir=$(find_library_dir libnccl nvidia.nccl)
[ -n "$cublas_dir" ] || { echo "run.sh: no libcublasLt (toolkit or nvidia-cublas wheel)" >&2; exit 2; }
[ -n "$nccl_dir" ] || { echo "run.sh: no libnccl (toolkit or nvidia-nccl wheel)" >&2; exit 2; }
library() { ls "$1/$2".so* | sort | head -1; }  # the file itself: wheels ship only libX.so.N
for d in "$cublas_dir" "$nccl_dir"; do
  [ -d "$d/../include" ] && includes+=(-isystem "$d/../include")
done
[ -f "$cuda_root/include/nccl.h" ] || [ -f "$nccl_dir/../include/nccl.h" ] || includes+=(-isystem "$deps/nccl")
nvflags=(-std=c++20 --expt-relaxed-constexpr -diag-suppress=445,186,1675 -arch=sm_$arch -O2 -Xcompiler=-fopenmp,-fno-math-errno "${includes[@]}")
cxxflags=(-std=c++20 -O2 -fopenmp -fno-math-errno "${includes[@]}" -I"$cuda_root/include")
libs=(-L"$deps/lib" -Xlinker -rpath -Xlinker "$deps/lib" -Xlinker -rpath -Xlinker "$cublas_dir"
      -Xlinker -rpath -Xlinker "$nccl_dir"
      -l:libdnnl.so.2 -l:libpcre2-8.so.0 -l:libz.so.1 -l:libmpi_cxx.so.40 -l:libmpi.so.40
      "$(library "$cublas_dir" libcublasLt)" "$(library "$cublas_dir" libcublas)" "$(library "$nccl_dir" libnccl)"
      -lgomp -lpthread)
log() { echo "== $* ($(date -u +%H:%M:%S))" | tee -a "$OUT/summary.log"; }

log "build: nvcc $("$NVCC" --version | tail -1), sm_$arch, $jobs jobs, cuBLASLt in $cublas_dir, NCCL in $nccl_dir"
start=$SECONDS
objects=()
pids=()
for source in tests/cuda/*.cu; do
  object="$build/$(basename "$source").o"
  objects+=("$object")
  "$NVCC" "${nvflags[@]}" -c "$source" -o "$object" >"$object.log" 2>&1 &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 0.2; done
done
for source in tests/cuda/*.cpp; do
  object="$build/$(basename "$source").o"
  objects+=("$object")
  g++ "${cxxflags[@]}" -c "$source" -o "$object" >"$object.log" 2>&1 &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=1; done
cat "$build"/*.o.log > "$OUT/build.log" 2>/dev/null
if [ $failed -ne 0 ]; then log "build FAILED (see build.log)"; exit 1; fi
"$NVCC" -arch=sm_$arch "${objects[@]}" -o "$build/typeflow_cuda_tests" "${libs[@]}" >>"$OUT/build.log" 2>&1 ||
  { log "link of typeflow_cuda_tests FAILED"; exit 1; }
for source in bench/gpu/*.cu; do
  name=$(basename "$source" .cu)
  "$NVCC" "${nvflags[@]}" "$source" -o "$build/$name" "${libs[@]}" -l:libbenchmark.so.1debian >>"$OUT/build.log" 2>&1 &
done
wait || true
for source in bench/gpu/*.cu; do
  [ -x "$build/$(basename "$source" .cu)" ] || { log "build of $source FAILED"; failed=1; }
done
log "build took $((SECONDS - start)) s"
[ "${1:-}" = "--build-only" ] && exit $failed

log "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee -a "$OUT/summary.log"

log "tests"
"$build/typeflow_cuda_tests" --duration=true 2>&1 | tee "$OUT/tests.log" | tail -5 | tee -a "$OUT/summary.log"

export PYTHONUNBUFFERED=1
log "gemm: typeflow, then torch"
"$build/gemm_bench" --benchmark_min_time=0.5 2>&1 | tee "$OUT/gemm.log" | grep -E "^BM|^-" | tail -40
python3 bench/gpu/torch_gemm.py 2>&1 | tee -a "$OUT/gemm.log" | tail -30

log "normalization and loss kernels: typeflow, then torch"
"$build/norm_bench" --benchmark_min_time=0.5 2>&1 | tee "$OUT/norm.log" | grep -E "^BM" | tail -30
python3 bench/gpu/torch_norm.py 2>&1 | tee -a "$OUT/norm.log" | tail -30

log "MLP training step: typeflow, then torch eager"
"$build/mlp_train_step" --benchmark_min_time=2 2>&1 | tee "$OUT/mlp.log" | grep -E "^BM"
python3 bench/gpu/torch_mlp.py 2>&1 | tee -a "$OUT/mlp.log"
log "done"

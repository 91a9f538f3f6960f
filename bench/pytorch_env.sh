# Sourced by bench/compare_pytorch.sh and bench/compare_pytorch_gpt.sh: finds
# a python3 that imports torch and makes sure its sgemm is an optimised BLAS.
#
#   source bench/pytorch_env.sh; pytorch_env_setup NAME
#
# sets $python (a python3 with torch; installs Debian's python3-torch if none
# has it) and $blas (the BLAS library torch maps after a matmul). Debian's
# python3-torch calls sgemm through libblas.so.3, and where that is the
# reference (netlib) BLAS its Linear layers run at ~2 GFLOP/s, so this
# installs libopenblas0-pthread in that case (TYPEFLOW_BENCH_KEEP_BLAS=1
# skips that and compares against whatever is there). NAME prefixes errors.

log() { echo "== $*" >&2; }

find_torch_python() {
  local candidate
  for candidate in python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import torch' >/dev/null 2>&1; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y "$@" >&2 || { apt-get update >&2 && apt-get install -y "$@" >&2; }
}

# Which BLAS a torch process really maps after a matmul (its sgemm's library).
torch_blas() {
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 "$python" - <<'PYTHON'
import torch
torch.rand(64, 64) @ torch.rand(64, 64)
libs = set()
with open("/proc/self/maps") as maps:
    for line in maps:
        path = line.split()[-1]
        name = path.rsplit("/", 1)[-1]
        if "blas" in name or "mkl" in name:
            import os
            real = os.path.realpath(path)
            libs.add(path if real == path else f"{path} -> {real}")
print("; ".join(sorted(libs)) or "none")
PYTHON
}

pytorch_env_setup() {
  local name=$1
  if ! python=$(find_torch_python); then
    log "no python3 imports torch: installing python3-torch"
    apt_install python3-torch
    python=$(find_torch_python) || { echo "$name: torch still not importable after installing python3-torch" >&2; exit 1; }
  fi
  blas=$(torch_blas)
  if [[ $blas == *"/blas/libblas.so"* && $blas != *openblas* && ${TYPEFLOW_BENCH_KEEP_BLAS:-0} != 1 ]]; then
    log "PyTorch would run its sgemm in the reference BLAS ($blas): installing libopenblas0-pthread"
    apt_install libopenblas0-pthread
    blas=$(torch_blas)
  fi
}

# configure_release_build DIR: configures DIR as Release (Ninja where there is
# one) unless it has a cache; prints its build type.
configure_release_build() {
  local dir=$1
  if [[ ! -f $dir/CMakeCache.txt ]]; then
    local generator=()
    command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
    log "configuring $dir (Release)"
    cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >&2
  fi
  local type
  type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$dir/CMakeCache.txt")
  [[ $type == Release ]] || log "warning: $dir is a '$type' build, not Release"
  echo "$type"
}

# build_typeflow_bench SCRIPT TARGET: sets $bench (build_dir/bench/TARGET) and
# $build_type, and, unless $pytorch_only is 1, configures $build_dir as
# Release if it has no cache and builds TARGET; SCRIPT prefixes errors.
build_typeflow_bench() {
  local script=$1 target=$2
  bench=$build_dir/bench/$target
  build_type=n/a
  [[ ${pytorch_only:-0} == 1 ]] && return 0
  build_type=$(configure_release_build "$build_dir")
  log "building $target"
  cmake --build "$build_dir" --target "$target" >&2 || {
    echo "$script: could not build $target (bench/$target.cpp); --pytorch-only runs the PyTorch side alone" >&2
    exit 1
  }
}

# side_environments PASSIVE: the `env ...` prefixes each side runs under, as
# the arrays typeflow_env and torch_env. Both: OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE unset, OMP_NUM_THREADS=2. PyTorch also gets
# OMP_WAIT_POLICY=PASSIVE and a glibc malloc that keeps big blocks; typeflow
# gets OMP_WAIT_POLICY=PASSIVE when PASSIVE is 1.
side_environments() {
  local common=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2)
  torch_env=("${common[@]}" OMP_WAIT_POLICY=PASSIVE
             GLIBC_TUNABLES=glibc.malloc.mmap_threshold=1073741824:glibc.malloc.trim_threshold=4294967296)
  typeflow_env=("${common[@]}")
  if [[ $1 == 1 ]]; then typeflow_env+=(OMP_WAIT_POLICY=PASSIVE); fi
}

# cpu_busy: percent of all cores' time not idle over the next 2 seconds.
cpu_busy() {
  local a b a1 a2 a3 a4 a5 a6 a7 a8 b1 b2 b3 b4 b5 b6 b7 b8
  read -r _ a1 a2 a3 a4 a5 a6 a7 a8 _ < /proc/stat
  sleep 2
  read -r _ b1 b2 b3 b4 b5 b6 b7 b8 _ < /proc/stat
  a=$((a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8)); b=$((b1 + b2 + b3 + b4 + b5 + b6 + b7 + b8))
  echo $(( 100 - 100 * ((b4 + b5) - (a4 + a5)) / (b - a > 0 ? b - a : 1) ))
}

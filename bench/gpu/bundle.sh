#!/usr/bin/env bash
# Builds, here on the CPU machine, everything the GPU check (bench/gpu/run.sh)
# runs, and packs it with the shared libraries the GPU machine lacks into one
# file, so that device minutes go to running, not compiling:
#
#   bench/gpu/bundle.sh          # -> .gpu-bundle/typeflow-gpu.tar.xz (ignored by git)
#   bench/gpu/run.sh --dry       # here: unpack it, check every binary's libraries, start the tests
#   device run, carry .gpu-bundle: bash bench/gpu/run.sh
#
# The binaries are built for sm_90 by the project's own CMake (build-gpu/),
# with host code for x86-64-v3 (AVX2, FMA): the GPU machine's CPU is not
# this one. cudart is linked statically. Left out of the bundle, because the
# GPU machine has its own and run.sh finds them there: the driver
# (libcuda), cuBLAS/cuBLASLt, NCCL and cuDNN (the toolkit's or PyTorch's
# nvidia-* wheels), the C library and the compiler's runtime (libstdc++,
# libgcc_s). Everything else a binary loads travels (oneDNN and its OpenCL
# loader, Open MPI, Google Benchmark, zlib, PCRE2, libgomp, ...), plus the
# headers of bench/gpu/gather_deps.sh, for run.sh's fallback build on the
# GPU machine of a binary whose libraries do not resolve there.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=${BUILD:-build-gpu}
stage=.gpu-bundle/typeflow-gpu
# TARGETS="gemm_algos" packs only those (a quicker bundle for one phase).
read -r -a targets <<< "${TARGETS:-typeflow_cuda_tests gemm_bench norm_bench mlp_train_step gpt2_train_step gemm_algos}"

if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTYPEFLOW_NATIVE=OFF -DTYPEFLOW_PCH=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DTYPEFLOW_CUDA_COMPILE_ONLY=OFF \
    -DCMAKE_CXX_FLAGS="-march=x86-64-v3" -DCMAKE_CUDA_FLAGS="-Xcompiler=-march=x86-64-v3"
fi
grep -q typeflow_cuda_tests "$build/build.ninja" ||
  { echo "bundle.sh: $build has no CUDA targets (no nvcc or NCCL found at configure time)" >&2; exit 2; }
ninja -C "$build" -j"${JOBS:-$(nproc)}" "${targets[@]}" gpu_readers_fixture

rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib"
binaries=()
for t in "${targets[@]}"; do
  path=$(find "$build" -name "$t" -type f -perm -u+x | head -1)
  [ -n "$path" ] || { echo "bundle.sh: $t was not built" >&2; exit 1; }
  cp "$path" "$stage/bin/"
  strip --strip-debug "$stage/bin/$t"
  binaries+=("$stage/bin/$t")
done

# The libraries the GPU machine provides itself (see above); the rest travel.
provided='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libcuda|libcublas|libcublasLt|libnccl|libcudnn[a-z_]*|libstdc\+\+|libgcc_s)\.so'
for b in "${binaries[@]}"; do
  ldd "$b" | awk '/=>/ && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $provided ]] && continue
  cp -L "$path" "$stage/lib/$name"
done
# Open MPI's own plugins are loaded with dlopen only by MPI_Init, which the
# single-machine binaries never call; nothing of them travels.

# Headers for the fallback build (run.sh builds a binary there only when ldd
# finds a library missing).
bench/gpu/gather_deps.sh >/dev/null
cp -r .gpu-deps "$stage/deps"
# Files for the readers on the GPU machine (bench/gpu/readers.py).
"$build/bench/gpu_readers_fixture" "$stage/readers"
git rev-parse HEAD > "$stage/COMMIT"
git status --porcelain --untracked-files=no | grep -q . && echo "(with uncommitted changes)" >> "$stage/COMMIT"
nvcc_version=$("$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" --version | tail -1)
echo "$nvcc_version" > "$stage/NVCC"

tar -C .gpu-bundle -cf - typeflow-gpu | xz -T0 -6 > .gpu-bundle/typeflow-gpu.tar.xz
rm -rf "$stage"
ls -l .gpu-bundle/typeflow-gpu.tar.xz | awk '{printf "bundle.sh: .gpu-bundle/typeflow-gpu.tar.xz, %.1f MB\n", $5 / 1e6}'

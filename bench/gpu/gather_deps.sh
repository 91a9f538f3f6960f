#!/usr/bin/env bash
# Copies the system headers that the CUDA tests and benchmarks include (found
# with g++ -M, so only those travel) into .gpu-deps/ (ignored by git), for
# bench/gpu/run.sh's fallback build on the GPU machine, which has nvcc, cmake
# and PyTorch but no Debian packages. bench/gpu/bundle.sh runs it and packs
# the headers beside the binaries and their libraries.
set -euo pipefail
cd "$(dirname "$0")/../.."
deps=.gpu-deps
rm -rf "$deps"
mkdir -p "$deps/include"

mpi_include=$(mpicxx --showme:incdirs 2>/dev/null | awk '{print $1}')
mpi_include=${mpi_include:-/usr/lib/x86_64-linux-gnu/openmpi/include}
sources=(tests/cuda/model_reference.cpp)
probe=$(mktemp --suffix=.cpp)
trap 'rm -f "$probe"' EXIT
cat > "$probe" <<'CPP'
#include <typeflow/typeflow.hpp>
#include <mpi.h>
#include <doctest/doctest.h>
#include <benchmark/benchmark.h>
CPP
sources+=("$probe")
# Every header outside the tree and the compiler's own, with its path kept.
for s in "${sources[@]}"; do
  g++ -std=c++20 -M -Iinclude -I"$mpi_include" "$s"
done | tr ' \\' '\n\n' | grep -E '^/usr/(include|lib/x86_64-linux-gnu/openmpi/include)/' |
  grep -vE '^/usr/include/(c\+\+|x86_64-linux-gnu/c\+\+)/' | sort -u |
  while read -r header; do
    case "$header" in
      /usr/lib/x86_64-linux-gnu/openmpi/include/*) target="$deps/include/${header#/usr/lib/x86_64-linux-gnu/openmpi/include/}" ;;
      /usr/include/x86_64-linux-gnu/*) target="$deps/include/${header#/usr/include/x86_64-linux-gnu/}" ;;
      *) target="$deps/include/${header#/usr/include/}" ;;
    esac
    # glibc's own headers stay: the GPU machine has its own C library.
    case "$header" in
      /usr/include/x86_64-linux-gnu/bits/*|/usr/include/x86_64-linux-gnu/sys/*|/usr/include/x86_64-linux-gnu/gnu/*|/usr/include/x86_64-linux-gnu/asm/*) continue ;;
    esac
    case "${header#/usr/include/}" in
      boost/*|doctest/*|benchmark/*|nlohmann/*|oneapi/*|dnnl*|pcre2*|zlib.h|zconf.h|mpi*|openmpi/*|omp.h) ;;
      *) [[ "$header" == /usr/lib/x86_64-linux-gnu/openmpi/include/* || "$header" == /usr/include/x86_64-linux-gnu/* ]] || continue ;;
    esac
    mkdir -p "$(dirname "$target")"
    cp "$header" "$target"
  done

# NCCL's header, for a toolkit without it (run.sh uses it only then).
mkdir -p "$deps/nccl"
cp /usr/local/cuda/include/nccl.h "$deps/nccl/"
du -sh "$deps"

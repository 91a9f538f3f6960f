#!/usr/bin/env bash
# Copies what bench/gpu/run.sh needs and the GPU machine lacks into .gpu-deps/
# (ignored by git): the system headers that the CUDA tests and benchmarks
# include (found with g++ -M, so only those travel), and the shared libraries
# the g++-compiled CPU half of the tests links (oneDNN, Open MPI, PCRE2,
# zlib) plus Google Benchmark. The GPU machine has nvcc, cmake and PyTorch,
# and no Debian packages. Run it here; the device call carries .gpu-deps.
set -euo pipefail
cd "$(dirname "$0")/../.."
deps=.gpu-deps
rm -rf "$deps"
mkdir -p "$deps/include" "$deps/lib"

mpi_include=$(mpicxx --showme:incdirs 2>/dev/null | awk '{print $1}')
mpi_include=${mpi_include:-/usr/lib/x86_64-linux-gnu/openmpi/include}
sources=(tests/cuda/model_reference.cpp)
probe=$(mktemp --suffix=.cpp)
trap 'rm -f "$probe"' EXIT
cat > "$probe" <<'CPP'
#include <typeflow/typeflow.hpp>
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

# Libraries, under the names the linker and loader ask for (no links: links
# travel as links).
copy_lib() {  # copy_lib <soname path> <name to give>
  cp -L "$1" "$deps/lib/$2"
}
lib=/usr/lib/x86_64-linux-gnu
copy_lib "$lib/libdnnl.so.2" libdnnl.so.2
copy_lib "$lib/libbenchmark.so.1debian" libbenchmark.so.1debian
copy_lib "$lib/libpcre2-8.so.0" libpcre2-8.so.0
copy_lib "$lib/libz.so.1" libz.so.1
for l in libmpi.so.40 libmpi_cxx.so.40 libopen-rte.so.40 libopen-pal.so.40 libhwloc.so.15 \
         libevent_core-2.1.so.7 libevent_pthreads-2.1.so.7 libudev.so.1; do
  [ -e "$lib/$l" ] && copy_lib "$lib/$l" "$l"
done
# NCCL's header, for a toolkit without it (run.sh uses it only then).
mkdir -p "$deps/nccl"
cp /usr/local/cuda/include/nccl.h "$deps/nccl/"
du -sh "$deps"

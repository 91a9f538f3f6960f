#!/usr/bin/env bash
# Builds everything and runs every test with ctest.
#
#   scripts/test.sh             build/ (Release): unit, standalone, compile-fail, install tests
#   scripts/test.sh sanitize    build-sanitize/ with ASan+UBSan: unit and standalone tests only
#   scripts/test.sh tsan        build-tsan/ with ThreadSanitizer: the data pipeline tests only
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

mode="${1:-all}"
# ctest -j2 runs two tests at once, each with two OpenMP threads, beside
# compilers in the compile-fail tests: spinning OpenMP threads then wait for
# descheduled ones. Passive waiting took the whole suite from 4 m 50 s to
# 3 m 8 s here (2 cores, 2026-11-30), and the MNIST mixed-precision test from
# 105 s to 10 s in a pairing seen in CI.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
start=${SECONDS}
report_time() { printf 'test.sh %s: %d s\n' "${mode}" "$((SECONDS - start))"; }
trap report_time EXIT

setup_packages
setup_mnist
setup_moby_dick
setup_gpt2_bpe
setup_kjv

case "${mode}" in
  all)
    # Without an NVIDIA device the CUDA tests, examples and benchmarks can
    # only be compiled (cuda.tests skips): at -O0, which takes a third less
    # time (CMakeLists.txt, TYPEFLOW_CUDA_COMPILE_ONLY).
    cuda_compile_only=OFF
    compgen -G '/dev/nvidia[0-9]*' >/dev/null || cuda_compile_only=ON
    setup_configure "${TYPEFLOW_BUILD_DIR}" -DTYPEFLOW_CUDA_COMPILE_ONLY="${cuda_compile_only}"
    setup_build "${TYPEFLOW_BUILD_DIR}"
    ctest --test-dir "${TYPEFLOW_BUILD_DIR}" --output-on-failure -j "${TYPEFLOW_JOBS}"
    ;;
  sanitize)
    dir="${TYPEFLOW_ROOT}/build-sanitize"
    setup_configure "${dir}" -DTYPEFLOW_SANITIZE=ON -DTYPEFLOW_BUILD_EXAMPLES=OFF -DTYPEFLOW_BUILD_BENCH=OFF
    setup_build "${dir}" --target typeflow_tests typeflow_standalone_tests typeflow_mpi_multi_worker_test
    # Compile-fail and install tests build nothing that a sanitizer could check.
    ctest --test-dir "${dir}" --output-on-failure -j "${TYPEFLOW_JOBS}" -LE 'compile_fail|install'
    ;;
  tsan)
    dir="${TYPEFLOW_ROOT}/build-tsan"
    setup_configure "${dir}" -DTYPEFLOW_TSAN=ON -DTYPEFLOW_BUILD_EXAMPLES=OFF -DTYPEFLOW_BUILD_BENCH=OFF
    setup_build "${dir}" --target typeflow_data_tests
    # halt_on_error: a race fails its test rather than scrolling past.
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
      ctest --test-dir "${dir}" --output-on-failure -j "${TYPEFLOW_JOBS}"
    ;;
  *)
    echo "usage: $0 [sanitize|tsan]" >&2
    exit 2
    ;;
esac

#!/usr/bin/env bash
# Builds everything and runs every test with ctest.
#
#   scripts/test.sh             build/ (Release): unit, standalone, compile-fail, install tests
#   scripts/test.sh sanitize    build-sanitize/ with ASan+UBSan: unit and standalone tests only
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

mode="${1:-all}"
start=${SECONDS}
report_time() { printf 'test.sh %s: %d s\n' "${mode}" "$((SECONDS - start))"; }
trap report_time EXIT

setup_packages
setup_mnist

case "${mode}" in
  all)
    setup_configure "${TYPEFLOW_BUILD_DIR}"
    setup_build "${TYPEFLOW_BUILD_DIR}"
    ctest --test-dir "${TYPEFLOW_BUILD_DIR}" --output-on-failure -j "${TYPEFLOW_JOBS}"
    ;;
  sanitize)
    dir="${TYPEFLOW_ROOT}/build-sanitize"
    setup_configure "${dir}" -DTYPEFLOW_SANITIZE=ON -DTYPEFLOW_BUILD_EXAMPLES=OFF -DTYPEFLOW_BUILD_BENCH=OFF
    setup_build "${dir}" --target typeflow_tests typeflow_standalone_tests
    # Compile-fail and install tests build nothing that a sanitizer could check.
    ctest --test-dir "${dir}" --output-on-failure -j "${TYPEFLOW_JOBS}" -LE 'compile_fail|install'
    ;;
  *)
    echo "usage: $0 [sanitize]" >&2
    exit 2
    ;;
esac

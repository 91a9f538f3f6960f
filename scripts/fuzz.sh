#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/, one per reader) with clang 14 in
# build-fuzz/ and runs them, TYPEFLOW_JOBS (2) processes at a time.
#
#   scripts/fuzz.sh short   CI's step: replays tests/fuzz/regressions/ (ctest -L fuzz),
#                           then runs every target for TYPEFLOW_FUZZ_SECONDS (10) from
#                           its seed corpus
#   scripts/fuzz.sh long    runs every target for TYPEFLOW_FUZZ_RUNS (1000000) executions
#   scripts/fuzz.sh build   builds the targets and writes the seed corpus, runs nothing
#   scripts/fuzz.sh MODE fuzz_csv fuzz_idx ...   only those targets
#
# Each mode writes build-fuzz/fuzz-<mode>-stats.tsv: per target the executions,
# executions per second, seconds, coverage (libFuzzer's cov: edges and ft:
# features), corpus size, peak memory, and ok or the input that failed.
#
# A target fails on a crash, a leak, an AddressSanitizer or UBSan report, an
# escaped exception, an input that runs over 10 s, an allocation over 512 MiB,
# or a broken property of its own (tests/fuzz/fuzz_support.hpp). libFuzzer saves
# the input as build-fuzz/artifacts/<target>/crash-<sha1> (or leak-, timeout-,
# oom-); once the reader is fixed, copy it to tests/fuzz/regressions/<target>/,
# which the short mode replays ever after. Any failure makes the script exit 1
# after all targets have run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

mode="${1:-short}"
shift || true
only=("$@")  # target names; none: every target
case "${mode}" in
  short | long | build) ;;
  *)
    echo "usage: $0 [short|long|build]" >&2
    exit 2
    ;;
esac
start=${SECONDS}
report_time() { printf 'fuzz.sh %s: %d s\n' "${mode}" "$((SECONDS - start))"; }
trap report_time EXIT

dir="${TYPEFLOW_ROOT}/build-fuzz"
setup_packages
setup_fuzz_packages
setup_moby_dick   # seed text
setup_gpt2_bpe    # the vocabulary fuzz_gpt2_encode loads, and seed merges
CC=clang-14 CXX=clang++-14 setup_configure "${dir}" -DTYPEFLOW_FUZZ=ON \
  -DTYPEFLOW_BUILD_EXAMPLES=OFF -DTYPEFLOW_BUILD_BENCH=OFF -DTYPEFLOW_CUDA=OFF
setup_build "${dir}" --target typeflow_fuzz_targets
rm -rf "${dir}/corpus/seeds"
"${dir}/tests/fuzz/typeflow_fuzz_seed_corpus" "${dir}/corpus/seeds" "${TYPEFLOW_ROOT}/data"
[[ "${mode}" == build ]] && exit 0

export TYPEFLOW_DATA_DIR="${TYPEFLOW_ROOT}/data"
failed=0
if [[ "${mode}" == short ]]; then
  ctest --test-dir "${dir}" --output-on-failure -L fuzz || failed=1
fi

# libFuzzer's options. The corpus directory first: new inputs go there; the
# seeds second, read only. -max_len: the largest input it makes (the GPT-2
# vocabulary's seeds need more room for their 256 byte tokens).
common=(-rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 -print_final_stats=1)
if [[ "${mode}" == short ]]; then
  budget=(-max_total_time="${TYPEFLOW_FUZZ_SECONDS:-10}")
else
  budget=(-runs="${TYPEFLOW_FUZZ_RUNS:-1000000}")
fi
stats="${dir}/fuzz-${mode}-stats.tsv"
printf 'target\texecutions\texec_per_s\tseconds\tcov\tft\tcorpus\tpeak_rss_mb\tresult\n' >"${stats}"

# The value after "name:" on the last line of log that has it.
last_value() { grep -o "$2:[[:space:]]*[0-9]*" "$1" | tail -n 1 | grep -o '[0-9]*$' || echo '?'; }

# run_target PROGRAM: one target's run; its statistics line goes to
# ${dir}/logs/<target>-<mode>.stats, and "failed" to <target>-<mode>.failed.
run_target() {
  local program="$1" target max_len work artifacts log began status seconds result
  target="$(basename "${program}")"
  max_len=8192
  [[ "${target}" == fuzz_gpt2_load ]] && max_len=32768
  work="${dir}/corpus/${target}-${mode}"
  artifacts="${dir}/artifacts/${target}/"
  log="${dir}/logs/${target}-${mode}.log"
  rm -rf "${work}" "${log%.log}.stats" "${log%.log}.failed"
  mkdir -p "${work}" "${artifacts}" "$(dirname "${log}")"
  began=${SECONDS}
  status=0
  "${program}" "${common[@]}" "${budget[@]}" -max_len="${max_len}" -artifact_prefix="${artifacts}" \
    "${work}" "${dir}/corpus/seeds/${target}" >"${log}" 2>&1 || status=$?
  seconds=$((SECONDS - began))
  result=ok
  if ((status != 0)); then
    echo failed >"${log%.log}.failed"
    result="failed: $(grep -o "Test unit written to .*" "${log}" | tail -n 1 | sed 's/Test unit written to //' || true)"
    [[ "${result}" == "failed: " ]] && result="failed: exit status ${status}, see ${log}"
    echo "==> ${target} FAILED (exit status ${status}); the end of ${log}:" >&2
    tail -n 60 "${log}" >&2
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${target}" \
    "$(last_value "${log}" stat::number_of_executed_units)" "$(last_value "${log}" stat::average_exec_per_sec)" \
    "${seconds}" "$(last_value "${log}" cov)" "$(last_value "${log}" ft)" "$(last_value "${log}" corp)" \
    "$(last_value "${log}" stat::peak_rss_mb)" "${result}" >"${log%.log}.stats"
}

# TYPEFLOW_JOBS targets at a time (each libFuzzer process is one thread):
# on 2 cores the nine short runs take about half as long as one by one.
targets=()
for program in "${dir}"/tests/fuzz/fuzz_*; do
  target="$(basename "${program}")"
  if ((${#only[@]} > 0)) && [[ " ${only[*]} " != *" ${target} "* ]]; then continue; fi
  targets+=("${target}")
  while (($(jobs -rp | wc -l) >= TYPEFLOW_JOBS)); do wait -n || true; done
  run_target "${program}" &
done
wait
for target in "${targets[@]}"; do
  cat "${dir}/logs/${target}-${mode}.stats" >>"${stats}"
  [[ -f "${dir}/logs/${target}-${mode}.failed" ]] && failed=1
done

column -t -s $'\t' "${stats}"
echo "statistics: ${stats}"
exit "${failed}"

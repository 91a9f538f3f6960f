#!/usr/bin/env bash
# Behind the mpi.multi_worker.<failure> tests: runs an MPI job in which a
# worker fails, and passes only if the whole job stops, non-zero, within a
# time limit, and its output holds the expected message.
#
#   expect_job_failure.sh LIMIT_SECONDS REGEX COMMAND [ARGS...]
#
# REGEX is an extended regular expression (grep -E). The job's output is
# printed, then its exit status and how long it took to stop.
set -uo pipefail
if (($# < 3)); then
  echo "usage: $0 LIMIT_SECONDS REGEX COMMAND [ARGS...]" >&2
  exit 2
fi
limit="$1"
regex="$2"
shift 2

start="$(date +%s.%N)"
output="$(timeout --kill-after=10 "${limit}" "$@" 2>&1)"
status=$?
end="$(date +%s.%N)"
elapsed="$(awk -v a="${start}" -v b="${end}" 'BEGIN { printf "%.1f", b - a }')"

printf '%s\n' "${output}"
echo "--- the job exited with status ${status} after ${elapsed} s (limit ${limit} s)"
# timeout(1) exits 124 when it stopped the job, or 137 when it had to kill it;
# a job killed by a signal within the limit may exit 137 too, hence the time.
if ((status == 124)) || awk -v e="${elapsed}" -v l="${limit}" 'BEGIN { exit !(e >= l) }'; then
  echo "FAILED: the job was still running after ${limit} s; a failed worker left the others hanging"
  exit 1
fi
if ((status == 0)); then
  echo "FAILED: the job exited with status 0; a worker's failure must fail the job"
  exit 1
fi
if ! grep -Eq -- "${regex}" <<<"${output}"; then
  echo "FAILED: the output lacks the expected message /${regex}/"
  exit 1
fi
echo "PASSED: the job stopped with status ${status} in ${elapsed} s and printed /${regex}/"

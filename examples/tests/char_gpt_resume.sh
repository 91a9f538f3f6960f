#!/usr/bin/env bash
# char_gpt --resume: a run stopped by Ctrl-C (SIGINT) during its second epoch
# and started again ends with the same final validation loss, to the last
# digit, as a run that was never stopped.
#
#   char_gpt_resume.sh CHAR_GPT TEXT EPOCHS STEPS_PER_EPOCH
set -euo pipefail
program=$1 text=$2 epochs=$3 steps=$4
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT

final_loss() { grep -o 'final validation loss: .*' "$1" | cut -d' ' -f4; }

"${program}" "${text}" "${epochs}" "${steps}" > "${work}/whole.log"
expected=$(final_loss "${work}/whole.log")
[[ -n "${expected}" ]] || { echo "the uninterrupted run printed no final validation loss"; exit 1; }

# Interrupted once the first epoch's line is out: in the second epoch.
"${program}" "${text}" "${epochs}" "${steps}" --resume "${work}/ckpt" > "${work}/first.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -q 'Epoch 1/' "${work}/first.log" && break
  sleep 0.1
done
kill -INT "${pid}"
status=0
wait "${pid}" || status=$?
if ((status != 130)); then
  echo "the interrupted run exited with ${status}, not 130 (Ctrl-C after a checkpoint):"
  cat "${work}/first.log"
  exit 1
fi
grep -q 'interrupted: saved' "${work}/first.log" || { echo "no checkpoint was announced"; cat "${work}/first.log"; exit 1; }

"${program}" "${text}" "${epochs}" "${steps}" --resume "${work}/ckpt" > "${work}/second.log"
grep -q 'continuing from' "${work}/second.log" || { echo "the second run did not continue"; cat "${work}/second.log"; exit 1; }
resumed=$(final_loss "${work}/second.log")
echo "uninterrupted: ${expected}; interrupted and continued: ${resumed}"
grep 'interrupted: saved' "${work}/first.log"
[[ "${resumed}" == "${expected}" ]]

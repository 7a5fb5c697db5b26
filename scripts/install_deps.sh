#!/usr/bin/env bash
# Installs the Debian packages llmkv builds and tests with (skips what is present).
set -euo pipefail
PKGS=(build-essential cmake ninja-build pkg-config python3 python3-pip
      libutf8proc-dev libxxhash-dev libgtest-dev libgmock-dev libcmocka-dev libbenchmark-dev
      libmimalloc-dev libflatbuffers-dev flatbuffers-compiler libcli11-dev nlohmann-json3-dev
      clang clang-format libclang-rt-14-dev
      golang-go mono-mcs mono-devel nunit-console libnunit-cil-dev
      dpkg-dev lintian debootstrap file
      python3-matplotlib  # scripts/plot_bench.py (docs/charts)
      libopenmpi-dev openmpi-bin)  # the llmkv command's MPI ranks (tensor parallelism across processes)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install_deps: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2

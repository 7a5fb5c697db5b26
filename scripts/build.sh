#!/usr/bin/env bash
# Configures and builds llmkv (Release, CPU backend; the CUDA module too when nvcc exists).
# Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
shift || true
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release "$@" >&2
cmake --build "$BUILD" -j "$(nproc)" >&2

#!/usr/bin/env bash
# Cross-builds llmkv for 64-bit Windows with MinGW-w64 (Debian's g++-mingw-w64-x86-64-posix)
# from the same CMake as the Linux build: llmkv.dll (+ llmkv.dll.a, llmkv.def), llmkv.exe
# and the Windows tests. scripts/test_windows.sh runs them under Wine.
#
#   scripts/build_windows.sh [BUILD_DIR] [more cmake -D options]     (default: build-win)
#
# Debian has no Windows builds of the dependencies, so scripts/stage_windows_deps.sh stages
# them in BUILD_DIR/deps (cmake/windows-deps.cmake): the header-only ones from this machine's
# packages, and utf8proc, cmocka and mimalloc from the source tarballs of Debian's own
# packages (checksums from their .dsc). The build makes mimalloc.dll, which the host tier
# loads from beside llmkv.dll.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build-win}"
[[ $# -gt 0 ]] && shift
"$ROOT/scripts/install_deps.sh"
DEPS="$BUILD/deps"
"$ROOT/scripts/stage_windows_deps.sh" "$DEPS"  # the cross compiler, Wine, the staged dependencies

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/mingw-w64-x86_64.cmake" -DLLMKV_WIN_DEPS_DIR="$DEPS" \
    -DLLMKV_CUDA=OFF -DLLMKV_BUILD_BENCH=OFF "$@" >&2
cmake --build "$BUILD" -j "$(nproc)" >&2

#!/usr/bin/env bash
# Builds llmkv for Windows (scripts/build_windows.sh) and runs it under Wine: the Windows test
# subset through CTest (unit tests and every C API test; tests/windows.cmake says what is in
# it and why), then the village demo on the real model with llmkv.exe.
#
#   scripts/test_windows.sh [BUILD_DIR]        (default: build-win)
# LLMKV_MODEL names the model (default: scripts/fetch_model.sh's SmolLM2).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build-win}"
mkdir -p "$BUILD" && BUILD="$(cd "$BUILD" && pwd)"  # absolute: WINEPREFIX must be
"$ROOT/scripts/build_windows.sh" "$BUILD" -DLLMKV_BUILD_TESTS=ON
MODEL="${LLMKV_MODEL:-$("$ROOT/scripts/fetch_model.sh")}"
MODEL="$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")"  # absolute: Wine runs from Z:\

# A private Wine prefix inside the build tree (no state from or for the user's ~/.wine),
# created by the first program run in it (about 10 s); its %TEMP% holds the tests' files.
export WINEPREFIX="$BUILD/wineprefix" WINEDEBUG=-all
# The C API tests load llmkv.dll from their own directory; the host tier looks for
# mimalloc.dll beside the binary that holds llmkv (llmkv.dll, or a test linked statically).
for d in tests examples; do cp -f "$BUILD/llmkv.dll" "$BUILD/mimalloc.dll" "$BUILD/$d/"; done
cp -f "$BUILD/mimalloc.dll" "$BUILD/tools/llmkv/"
export LLMKV_MODEL="$MODEL"
unset TMPDIR  # the tests' temp files go to Wine's %TEMP%
wine cmd /c "echo Wine prefix ready, TEMP=%TEMP%" >&2
echo "== Windows tests under Wine ($(wine --version))" >&2
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)"
echo "== the demo under Wine: llmkv.exe demo on $(basename "$MODEL")" >&2
wine "$BUILD/tools/llmkv/llmkv.exe" demo -m "$MODEL" --villagers 4 -n 24
